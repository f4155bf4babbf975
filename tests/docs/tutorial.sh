#!/usr/bin/env bash
# Runs the commands of a documentation page in an empty folder and checks the page's shape against
# what they print.
#   tests/docs/tutorial.sh NARROWS [PAGE]
# NARROWS is the program to run wherever the page says `narrows`; PAGE defaults to docs/tutorial.md
# (the how-to pages, docs/how-to/*.md, are checked the same way). Messages start with the page's name.
#
# What the page holds, and what is done with it, in the page's order:
# - a block opened with "```LANG file=NAME" is a file the reader writes: its lines are written to NAME;
# - a block opened with "```console" (or "```console exit=N") holds commands, each on a line that
#   starts with "$ ", each followed by what it printed. Every command is run with bash in the folder;
#   it must exit with 0 (or N). The first line shown of its output (a line "…" marks a cut and is
#   skipped) must appear in what it printed, standard output and error together, with every number
#   taken as any number and trailing blanks ignored: the page's shape is checked, not its figures.
# Exit status 0 when every command passed, 1 otherwise (the first failure is reported with what the
# command printed).
set -u
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 NARROWS [PAGE]" >&2
  exit 2
fi
program=$(realpath "$1")
page=$(realpath "${2:-$(dirname "$0")/../../docs/tutorial.md}")
name=$(basename "$page" .md)
work=$(mktemp -d "${TMPDIR:-/tmp}/narrows-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin" "$work/folder"
ln -s "$program" "$work/bin/narrows"  # `narrows` on the page is this program
export PATH="$work/bin:$PATH" LC_ALL=C

# Every number as 0 and no trailing blanks: the shape of a line.
shape() { sed -E 's/[0-9]+/0/g; s/[[:space:]]+$//'; }

commands=0 files=0 start=$SECONDS
fail() {
  echo "$name: $page:$1: $2" >&2
  if [ -n "${3:-}" ]; then
    echo "--- it printed:" >&2
    cat "$3" >&2
  fi
  exit 1
}

# Runs the pending command (if any) and checks it.
cmd="" cmd_line=0 expect_status=0 first_output="" have_first=0
finish_command() {
  [ -n "$cmd" ] || return 0
  commands=$((commands + 1))
  echo "$name: \$ $cmd" >&2
  local out="$work/output.txt" status=0
  (cd "$work/folder" && bash -c "$cmd") < /dev/null > "$out" 2>&1 || status=$?
  [ "$status" = "$expect_status" ] || fail "$cmd_line" "'$cmd' exited with $status, the page expects $expect_status" "$out"
  if [ "$have_first" = 1 ]; then
    local want
    want=$(printf '%s\n' "$first_output" | shape)
    if [ -n "$want" ] && ! shape < "$out" | grep -qF -- "$want"; then
      fail "$cmd_line" "'$cmd' did not print the page's first line of its output: $first_output" "$out"
    fi
  fi
  cmd="" have_first=0 first_output=""
}

mode=text file="" file_lines=() number=0
while IFS= read -r line || [ -n "$line" ]; do
  number=$((number + 1))
  case $mode in
    text)
      if [[ $line =~ ^\`\`\`[A-Za-z0-9_-]*[[:space:]]+file=([^[:space:]]+)[[:space:]]*$ ]]; then
        mode=file file=${BASH_REMATCH[1]} file_lines=()
      elif [[ $line =~ ^\`\`\`console([[:space:]]+exit=([0-9]+))?[[:space:]]*$ ]]; then
        mode=console expect_block=${BASH_REMATCH[2]:-0}
      elif [[ $line == '```'* ]]; then
        mode=other
      fi
      ;;
    other)
      [[ $line == '```'* ]] && mode=text
      ;;
    file)
      if [[ $line == '```'* ]]; then
        mkdir -p "$(dirname "$work/folder/$file")"
        if [ ${#file_lines[@]} -gt 0 ]; then printf '%s\n' "${file_lines[@]}"; fi > "$work/folder/$file"
        files=$((files + 1))
        echo "$name: wrote $file" >&2
        mode=text
      else
        file_lines+=("$line")
      fi
      ;;
    console)
      if [[ $line == '```'* ]]; then
        finish_command
        mode=text
      elif [[ $line == '$ '* ]]; then
        finish_command
        cmd=${line#'$ '} cmd_line=$number expect_status=$expect_block
      elif [ -n "$cmd" ] && [ "$have_first" = 0 ] && [ "$line" != "…" ] && [ -n "$line" ]; then
        first_output=$line have_first=1
      fi
      ;;
  esac
done < "$page"

[ "$mode" = text ] || fail "$number" "a code block is not closed"
[ "$commands" -gt 0 ] || fail 1 "no \`\`\`console block with a \"\$ \" command line"
echo "$name: $commands commands and $files files of $page passed in $((SECONDS - start)) s"
