#!/bin/bash
# Guest side of vm/bench-probe.sh: probe overhead in one boot. Resets and prefills the read region once,
# then alternates fio runs of the same workload without and with the NVMe probe, ROUNDS times, printing one
# "ZTBP-BENCH" line per run: IOPS, and for traced runs the traced reads and lost events.
# Environment: as capture.sh (ZTBP_WORKLOAD, ZTBP_PREFILL, ZTBP_RESET, ZTBP_DEV, ZTBP_PROBE: default
# probes/nvme_zone.bt, ZTBP_EXPECTED: the commands of one run, which size its map) plus ZTBP_ROUNDS.
set -uo pipefail

# shellcheck source=vm/guest/capture.sh
. "$(dirname "${BASH_SOURCE[0]}")/capture.sh"
ROUNDS="${ZTBP_ROUNDS:-3}"

fio_read() {
	# Run the workload; print "<read IOPS> <read I/Os>" from fio's JSON (group_reporting: one job entry).
	fio --eta=never --output-format=json --output="$TMP/bench.json" "$WORKLOAD" || return 1
	local iops ios
	iops="$(grep -m1 '"iops" :' "$TMP/bench.json" | tr -dc '0-9.')"
	ios="$(grep -m1 '"total_ios" :' "$TMP/bench.json" | tr -dc '0-9')"
	echo "$iops $ios"
}

bench_main() {
	TMP="$(mktemp -d /tmp/ztbp-bench.XXXXXX)"
	: > "$TMP/guest.env"
	reset_zones || return 1
	prefill || return 1
	local r res lost traced
	for r in $(seq 1 "$ROUNDS"); do
		res="$(fio_read)" || return 1
		echo "ZTBP-BENCH round=$r probe=off iops=${res% *} fio_reads=${res#* }"
		start_probe || return 1
		res="$(fio_read)" || return 1
		stop_probe
		lost="$(sed -n 's/^lost_events_nvme=//p' "$TMP/guest.env" | tail -n 1)"
		traced="$(grep -c ',read,' "$TMP/nvme.csv")"
		echo "ZTBP-BENCH round=$r probe=on iops=${res% *} fio_reads=${res#* } traced_reads=$traced lost=$lost"
	done
}

bench_main "$@"
