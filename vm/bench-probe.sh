#!/usr/bin/env bash
# Probe overhead benchmark: in ONE guest boot, run the same fio workload ROUNDS times without and ROUNDS
# times with the NVMe probe (default probes/nvme_zone.bt) attached, alternating, and, with --tools, under the
# tools people use today (bpftrace's biosnoop.bt, bcc's biosnoop) in the same rounds; print the IOPS of every
# run, each tracer's ratio mean(with) / mean(without) (target >= 0.95 for the project's probe), the spread of
# the per-round ratios and the lost events. Writes bench.json to OUTDIR.
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
SUITE=""
TOOLS=""
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
  -s, --suite SUITE   guest image: bookworm (default) or trixie (vm/image.sh --suite)
  -t, --tools LIST    also measure these tools in the same rounds, each writing its output to a file:
                      biosnoop.bt (bpftrace's), biosnoop-bcc (bcc's biosnoop), e.g. biosnoop.bt,biosnoop-bcc
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
			-s|--suite) SUITE="$2"; shift ;;
			-t|--tools) TOOLS="$2"; shift ;;
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
	# The guest's ZTBP-BENCH lines -> table, per-tracer ratio and spread, bench.json. A tracer's ratio is the
	# mean of its IOPS over the mean without a tracer; its spread is the standard deviation of its per-round
	# ratios (each run over the run without a tracer of the same round).
	local console="$1"
	grep -a '^ZTBP-BENCH' "$console" | tr -d '\r' | awk -v target="$TARGET_RATIO" -v out="$OUTDIR/bench.json" \
		-v probe="$PROBE" '
		function sd(sum, sq, n) { return n > 1 ? sqrt(max0((sq - sum * sum / n) / (n - 1))) : 0 }
		function max0(x) { return x > 0 ? x : 0 }
		/^ZTBP-BENCH-ENV / { env = substr($0, 16); print env; next }
		{
			delete v
			for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
			t = v["probe"] == "on" ? probe : v["probe"]
			if (v["failed"] != "") { printf "round %s  %-22s failed (%s)\n", v["round"], t, v["failed"]; next }
			if (t == "off") {
				off[v["round"]] = v["iops"]; n_off++; s_off += v["iops"]; q_off += v["iops"] ^ 2
				printf "round %s  %-22s %9.0f IOPS\n", v["round"], "no tracer", v["iops"]
				next
			}
			if (!(t in n)) order[++k] = t
			r = (v["round"] in off) ? v["iops"] / off[v["round"]] : 0
			n[t]++; s[t] += v["iops"]; sr[t] += r; qr[t] += r ^ 2; lost[t] += v["lost"]
			traced[t] += v["traced_reads"]; fio[t] += v["fio_reads"]
			printf "round %s  %-22s %9.0f IOPS  %.3f of the round without  %d lost\n", v["round"], t, v["iops"], r,
				v["lost"]
		}
		END {
			if (!n_off || !k) { print "bench-probe: no results (see console.log)"; exit 1 }
			mo = s_off / n_off
			printf "no tracer: mean %.0f IOPS over %d runs, CV %.1f %%\n", mo, n_off, 100 * sd(s_off, q_off, n_off) / mo
			printf "{\"env\": \"%s\", \"rounds\": %d, \"iops_without\": %.1f, \"cv_without\": %.4f, \"tracers\": [",
				env, n_off, mo, sd(s_off, q_off, n_off) / mo > out
			for (j = 1; j <= k; j++) {
				t = order[j]; ratio = (s[t] / n[t]) / mo
				printf "%s: ratio %.3f (mean of %d rounds; per-round ratios %.3f +- %.3f), lost %d of %d reads%s\n",
					t, ratio, n[t], sr[t] / n[t], sd(sr[t], qr[t], n[t]), lost[t], fio[t],
					(t == probe ? sprintf(" (target >= %.2f: %s)", target, ratio >= target ? "OK" : "BELOW") : "")
				printf "%s{\"tracer\": \"%s\", \"rounds\": %d, \"iops_with\": %.1f, \"ratio\": %.4f, " \
					"\"ratio_sd\": %.4f, \"lost_events\": %d, \"traced_reads\": %d, \"fio_reads\": %d}",
					(j > 1 ? ", " : ""), t, n[t], s[t] / n[t], ratio, sd(sr[t], qr[t], n[t]), lost[t], traced[t],
					fio[t] > out
			}
			print "]}" > out
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
	echo "bench-probe: $WORKLOAD, $READS reads per run, $ROUNDS rounds without and with probes/$PROBE" \
		"${TOOLS:+and $TOOLS }(one boot${SUITE:+, $SUITE})"
	local suite_args=()
	[ -n "$SUITE" ] && suite_args=(--suite "$SUITE")
	bash "$REPO/vm/vmtest.sh" -q -o "$OUTDIR" -t 7200 "${suite_args[@]}" \
		--file "$jobs/bench.fio" \
		--file "$jobs/prefill.fio" \
		--env ZTBP_WORKLOAD=/ztbp/ctl/bench.fio \
		--env ZTBP_PREFILL=/ztbp/ctl/prefill.fio \
		--env "ZTBP_RESET=0 32" \
		--env "ZTBP_ROUNDS=$ROUNDS" \
		--env "ZTBP_PROBE=/ztbp/src/probes/$PROBE" \
		--env "ZTBP_EXPECTED=$READS" \
		--env "ZTBP_TOOLS=$TOOLS" \
		-- 'bash /ztbp/src/vm/guest/bench.sh'
	summarise "$OUTDIR/console.log"
	echo "bench-probe: results in $OUTDIR/bench.json"
}

main "$@"
