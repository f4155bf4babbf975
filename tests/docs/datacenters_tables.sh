#!/usr/bin/env bash
# The tables of docs/results/algorithms.md's "Across datacenters and the internet" are what
# docs/algorithms/datacenters_table.py prints from the committed records: every row it prints must be
# in the page as it is, so a figure edited by hand (or records changed without the page) fails.
# Usage: datacenters_tables.sh REPOSITORY_ROOT
set -euo pipefail
cd "$1"
page=docs/results/algorithms.md
status=0
for study in decentralized multi_datacenter; do
  rows=$(python3 docs/algorithms/datacenters_table.py print docs/results/datacenters/$study | grep '^|')
  while IFS= read -r row; do
    if ! grep -qxF -- "$row" "$page"; then
      echo "$page: no row '$row' (docs/algorithms/datacenters_table.py print docs/results/datacenters/$study)"
      status=1
    fi
  done <<< "$rows"
done
[ $status -eq 0 ] && echo "datacenters_tables: every row of both tables is the records' own"
exit $status
