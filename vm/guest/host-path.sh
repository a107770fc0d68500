#!/bin/bash
# Guest side of the host path's test (tests/test_host_path_vm.py, `just test-host-path`): the guest plays a user's
# Debian machine with a zoned drive. The workbench is installed there from its wheel with pip, as a user would,
# and run from a folder outside any checkout: `ztbp doctor`, `ztbp capture-host`, `ztbp cluster` on that capture,
# and `ztbp loop --host`. Each step's exit status and wall time go to $OUT/steps.env (STEP_rc, STEP_s), its
# output to $OUT/STEP.out and $OUT/STEP.err. Python's fault handler is on, so a crash leaves its Python stack in
# STEP.err.
#
# Environment:
#   ZTBP_OUT           the shared folder (default /ztbp/out); it holds the wheel (ztbp-*.whl), the wheelhouse of
#                      its dependencies (wheelhouse/, pip's own wheel among them) and, for a guest without make,
#                      a ztbp-ctl built for this Debian release (ztbp-ctl)
#   ZTBP_HOST_DEV      the zoned namespace (default /dev/nvme0n1)
#   ZTBP_HOST_READS    reads of the capture and of each loop round (default 20000)
#   ZTBP_HOST_REGION   their read region (default 1G; zones of 64 MiB need 2G for the paper's hot zone 19)
#   ZTBP_HOST_VENV     where the venv goes (default /opt/ztbp)
#   ZTBP_HOST_STEPS    the steps to run (default: install ctl doctor capture cluster loop)
#   ZTBP_KO, ZTBP_KO_PARAMS  a device module to load first (NVMeVirt; probe-lib.sh, module_load)
# Progress lines start with "ZTBP:".
set -uo pipefail

# shellcheck source=vm/guest/probe-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/probe-lib.sh"   # say, module_prepare, module_load
settings HOST_DEV=/dev/nvme0n1 HOST_READS=20000 HOST_REGION=1G HOST_VENV=/opt/ztbp \
	HOST_STEPS="install ctl doctor capture cluster loop"
TMP=""
ZTBP="$HOST_VENV/bin/ztbp"

step() { # NAME COMMAND...: run it from a folder outside any checkout; record its exit status and seconds
	local name="$1" t0 rc
	shift
	say "stage $name: $*"
	t0="$(date +%s.%N)"
	(cd /root && PYTHONFAULTHANDLER=1 "$@") > "$OUT/$name.out" 2> "$OUT/$name.err"
	rc=$?
	echo "${name}_rc=$rc" >> "$OUT/steps.env"
	echo "${name}_s=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}')" >> "$OUT/steps.env"
	say "stage $name: exit $rc"
	return "$rc"
}

install_wheel() { # a venv without pip (Debian's python3 has no ensurepip), then pip run from its own wheel.
	# --ignore-requires-python: the wheelhouse holds the versions of the host's environment, whose Python may be
	# newer than this Debian release's (soupsieve 2.8 asks 3.11.5, Debian 12 has 3.11.2); a user's pip online picks
	# versions for their Python
	local pip wheel
	pip="$(ls "$OUT"/wheelhouse/pip-*.whl | head -n 1)"
	wheel="$(ls "$OUT"/ztbp-*.whl | head -n 1)"
	[ -n "$pip" ] && [ -n "$wheel" ] || { say "error no wheel or no pip wheel in $OUT"; return 1; }
	python3 -m venv --without-pip "$HOST_VENV" &&
		"$HOST_VENV/bin/python" "$pip/pip" install -q --no-index --no-compile --ignore-requires-python \
			--find-links "$OUT/wheelhouse" "$pip" "$wheel"
}

install_ctl() { # `ztbp build-ctl` where make and a C compiler exist; otherwise the binary the host built
	if command -v make > /dev/null && command -v cc > /dev/null; then
		"$ZTBP" build-ctl
		return
	fi
	local dest
	dest="$("$HOST_VENV/bin/python" -c 'from ztbp.writeback.ctl import CTL; print(CTL)')" || return 1
	say "stage ctl: no make or cc here: the ztbp-ctl built on the host for this Debian release -> $dest"
	mkdir -p "$(dirname "$dest")" && install -m 0755 "$OUT/ztbp-ctl" "$dest"
}

main() {
	case "${1:-}" in -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}"; return 0 ;; esac
	TMP="$(mktemp -d /tmp/ztbp-host.XXXXXX)"
	: > "$TMP/guest.env"
	: > "$OUT/steps.env"
	say "stage booted $(cut -d' ' -f1 /proc/uptime) s"
	module_prepare && module_load "$HOST_DEV" || return 1
	local s
	for s in $HOST_STEPS; do
		case "$s" in
			install) step install install_wheel || return 1 ;;
			ctl) step ctl install_ctl || return 1 ;;
			doctor) step doctor "$ZTBP" doctor --json ;;
			capture) step capture "$ZTBP" capture-host "$HOST_DEV" paper80 --reads "$HOST_READS" \
				--region "$HOST_REGION" --destructive --json --out "$OUT/capture" ;;
			cluster) step cluster "$ZTBP" cluster "$OUT/capture" --json ;;
			loop) step loop "$ZTBP" loop paper80 --host "$HOST_DEV" --rounds 2 --reads "$HOST_READS" \
				--region "$HOST_REGION" --cache-mib 16 --json -o "$OUT/loop" ;;
			*) say "error unknown step '$s'"; return 1 ;;
		esac
	done
	module_unload
	say "stage done"
}

main "$@"
