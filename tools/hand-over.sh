#!/usr/bin/env bash
# hand-over.sh PATH...: under sudo (root with SUDO_UID set, not 0), give each PATH and everything under it to the
# user who ran sudo when the folder holding PATH is theirs (their checkout, never a system folder), so that what
# `sudo just apply` builds or installs in the checkout (tools/ztbp-ctl/build, .venv, the egg-info) stays theirs.
# Does nothing otherwise. The same rule as the package's files.hand_over.
set -euo pipefail
uid="${SUDO_UID:-}"
case "$uid" in '' | 0 | *[!0-9]*) exit 0 ;; esac
[ "$(id -u)" = 0 ] || exit 0
gid="${SUDO_GID:-}"
case "$gid" in '' | *[!0-9]*) gid="" ;; esac
for path in "$@"; do
    [ -e "$path" ] || continue
    [ "$(stat -c %u -- "$(dirname -- "$path")")" = "$uid" ] || continue
    chown -R -h -- "$uid${gid:+:$gid}" "$path"
done
