#!/usr/bin/env bash
# The committed key reference is what `narrows reference` prints from the declarations, byte for byte.
# Usage: reference.sh NARROWS DOC
set -euo pipefail
if "$1" reference | diff -u "$2" -; then
  echo "$2: up to date"
else
  echo "$2 differs from what narrows reference prints: regenerate it (build/narrows reference > docs/reference/scenario-keys.md)"
  exit 1
fi
