#!/usr/bin/env bash
# Probe overhead benchmark: in ONE guest boot, run the same fio workload ROUNDS times without and ROUNDS
# times with the NVMe probe (default probes/nvme_zone.bt) attached, alternating, and print the IOPS of every
# run, the ratio mean(with) / mean(without) (target >= 0.95), the spread of the runs and the lost-event
# count. Writes bench.json to OUTDIR.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ZTBP="${ZTBP:-$REPO/.venv/bin/ztbp}"
DEFAULT_ROUNDS=5
DEFAULT_PROBE="nvme_zone.bt"
DEFAULT_READS=200000
DEFAULT_WORKLOAD="paper80"
TARGET_RATIO=0.95

ROUNDS=$DEFAULT_ROUNDS
READS=$DEFAULT_READS
WORKLOAD=$DEFAULT_WORKLOAD
PROBE=$DEFAULT_PROBE
JOBS=0
OUTDIR=""

usage() {
	cat <<EOF
Usage: $0 [options]

Probe overhead in one VM boot: fio IOPS without and with an NVMe probe, alternated.

Options:
  -r, --rounds N      rounds of each kind (default: $DEFAULT_ROUNDS)
  -n, --reads N       4 KiB reads per fio run (default: $DEFAULT_READS)
  -w, --workload W    workload of \`ztbp workload\` (default: $DEFAULT_WORKLOAD)
  -j, --jobs N        fio jobs (default: the workload's)
  -p, --probe FILE    probe in probes/ (default: $DEFAULT_PROBE; nvme_zone_stream.bt for the streaming one)
  -o, --out DIR       where bench.json and console.log go (default: a temporary folder)
  -h, --help          this text

Needs the venv (just setup) and QEMU (just deps). Prints the ratio; target >= $TARGET_RATIO.
EOF
}

die() { echo "bench-probe: error: $*" >&2; exit 2; }

parse_args() {
	while [ $# -gt 0 ]; do
		case "$1" in
			-r|--rounds) ROUNDS="$2"; shift ;;
			-n|--reads) READS="$2"; shift ;;
			-w|--workload) WORKLOAD="$2"; shift ;;
			-j|--jobs) JOBS="$2"; shift ;;
			-p|--probe) PROBE="$2"; shift ;;
			-o|--out) OUTDIR="$2"; shift ;;
			-h|--help) usage; exit 0 ;;
			*) usage >&2; die "unknown option '$1'" ;;
		esac
		shift
	done
	[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
	[[ "$READS" =~ ^[1-9][0-9]*$ ]] || die "--reads must be a positive integer"
	[ -f "$REPO/probes/$PROBE" ] || die "no probe probes/$PROBE (see probes/README.md)"
	[ -x "$ZTBP" ] || die "$ZTBP not found: run 'just setup' first"
}

summarise() {
	# The guest's ZTBP-BENCH lines -> table, ratio, spread and bench.json.
	local console="$1"
	grep -a '^ZTBP-BENCH ' "$console" | sed 's/^ZTBP-BENCH //' | awk -v target="$TARGET_RATIO" \
		-v out="$OUTDIR/bench.json" -v probe="$PROBE" '
		function spread(sum, sq, n) { return n > 1 ? sqrt((sq - sum * sum / n) / (n - 1)) / (sum / n) : 0 }
		{
			for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
			if (v["probe"] == "off") {
				off += v["iops"]; off2 += v["iops"] ^ 2; n_off++; last_off = v["iops"]
				lo_off = (n_off == 1 || v["iops"] < lo_off) ? v["iops"] : lo_off
				hi_off = (n_off == 1 || v["iops"] > hi_off) ? v["iops"] : hi_off
				printf "round %s  probe off  %9.0f IOPS\n", v["round"], v["iops"]
			} else {
				on += v["iops"]; on2 += v["iops"] ^ 2; n_on++
				lost += v["lost"]; traced += v["traced_reads"]; fio += v["fio_reads"]
				printf "round %s  probe on   %9.0f IOPS  (%.3f of the run before it)\n", v["round"], v["iops"],
					v["iops"] / last_off
			}
		}
		END {
			if (!n_off || !n_on) { print "bench-probe: no results (see console.log)"; exit 1 }
			ratio = (on / n_on) / (off / n_off)
			printf "%s: mean without probe %.0f IOPS, with probe %.0f IOPS: ratio %.3f (target >= %.2f) %s\n",
				probe, off / n_off, on / n_on, ratio, target, (ratio >= target ? "OK" : "BELOW TARGET")
			printf "run-to-run spread (coefficient of variation): without %.1f %%, with %.1f %%; " \
				"runs without the probe ranged %.0f..%.0f IOPS\n",
				100 * spread(off, off2, n_off), 100 * spread(on, on2, n_on), lo_off, hi_off
			printf "traced reads %d of %d fio reads, lost events %d\n", traced, fio, lost
			printf "{\"probe\": \"%s\", \"rounds\": %d, \"iops_without\": %.1f, \"iops_with\": %.1f, " \
				"\"ratio\": %.4f, \"cv_without\": %.4f, \"cv_with\": %.4f, \"lost_events\": %d, " \
				"\"traced_reads\": %d, \"fio_reads\": %d}\n",
				probe, n_on, off / n_off, on / n_on, ratio, spread(off, off2, n_off), spread(on, on2, n_on),
				lost, traced, fio > out
		}'
}

main() {
	parse_args "$@"
	[ -n "$OUTDIR" ] || OUTDIR="$(mktemp -d "${TMPDIR:-/tmp}/ztbp-bench.XXXXXX")"
	mkdir -p "$OUTDIR"
	local jobs
	jobs="$(mktemp -d)"
	# shellcheck disable=SC2064  # remove this run's job folder
	trap "rm -rf '$jobs'" EXIT
	"$ZTBP" workload "$WORKLOAD" --reads "$READS" --jobs "$JOBS" -o "$jobs/bench.fio" --prefill "$jobs/prefill.fio" >/dev/null
	echo "bench-probe: $WORKLOAD, $READS reads per run, $ROUNDS rounds without and with probes/$PROBE (one boot)"
	bash "$REPO/vm/vmtest.sh" -q -o "$OUTDIR" -t 3600 \
		--file "$jobs/bench.fio" \
		--file "$jobs/prefill.fio" \
		--env ZTBP_WORKLOAD=/ztbp/ctl/bench.fio \
		--env ZTBP_PREFILL=/ztbp/ctl/prefill.fio \
		--env "ZTBP_RESET=0 32" \
		--env "ZTBP_ROUNDS=$ROUNDS" \
		--env "ZTBP_PROBE=/ztbp/src/probes/$PROBE" \
		--env "ZTBP_EXPECTED=$READS" \
		-- 'bash /ztbp/src/vm/guest/bench.sh'
	summarise "$OUTDIR/console.log"
	echo "bench-probe: results in $OUTDIR/bench.json"
}

main "$@"
