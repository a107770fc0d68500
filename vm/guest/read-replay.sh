#!/bin/bash
# Guest side of the read model's device check (tests/test_read_model_vm.py): NVMeVirt's module loaded once per run,
# the plan OUT/plan.txt replayed on it by read-replay.py (4 KiB reads at QD 1, the device's STATUS after each, SET
# and STOP where the plan says), the module unloaded; so every run starts from an empty cache.
#
# Environment:
#   ZTBP_OUT        folder shared with the host (default /ztbp/out): plan.txt in; per run NAME.csv (the reads),
#                   NAME-params.txt (the module's parameters as loaded), NAME-load.txt (the kernel log at load),
#                   NAME-dmesg.txt (at the end) out; runs.env: NAME_rc=RC
#   ZTBP_DEV        zoned block device (default /dev/nvme0n1)
#   ZTBP_KO, ZTBP_KO_PARAMS   the module and its parameters (NVMeVirt's memory and CPUs)
#   ZTBP_REPLAY_RUNS          runs, space-separated: NAME or NAME:PARAM=V,PARAM=V (parameters added to
#                             ZTBP_KO_PARAMS for that load; default "plain")
# Console lines start with "ZTBP: ".
set -uo pipefail

# shellcheck source=vm/guest/probe-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/probe-lib.sh"   # also OUT, DEV, SRC (the repository)

TMP="$(mktemp -d)"
CTL="$SRC/tools/ztbp-ctl/build/ztbp-ctl"
CTRL="${DEV%n[0-9]*}"
BASE_PARAMS="${ZTBP_KO_PARAMS:-}"
[ -x "$CTL" ] || die "no ztbp-ctl at $CTL (make -C tools/ztbp-ctl on the host)"
[ -f "$OUT/plan.txt" ] || die "no plan at $OUT/plan.txt"
: > "$OUT/runs.env"

for run in ${ZTBP_REPLAY_RUNS:-plain}; do
	name="${run%%:*}"
	extra=""
	[ "$name" = "$run" ] || extra="${run#*:}"
	ZTBP_KO_PARAMS="$BASE_PARAMS ${extra//,/ }"
	dmesg -C
	say "stage run $name: module parameters $ZTBP_KO_PARAMS"
	if ! module_prepare || ! module_load "$DEV"; then
		echo "${name}_rc=load" >> "$OUT/runs.env"
		break
	fi
	for p in /sys/module/nvmev/parameters/*; do echo "${p##*/}=$(cat "$p")"; done > "$OUT/$name-params.txt"
	dmesg > "$OUT/$name-load.txt"  # the module's own lines at load (STATUS logs two lines a read from here on)
	rc=0
	python3 "$SRC/vm/guest/read-replay.py" "$OUT/plan.txt" "$OUT/$name.csv" --dev "$DEV" --ctrl "$CTRL" \
		--ctl "$CTL" || rc=$?
	dmesg > "$OUT/$name-dmesg.txt"
	module_unload
	echo "${name}_rc=$rc" >> "$OUT/runs.env"
	say "stage run $name: exit $rc"
done
rm -rf "$TMP"
