#!/bin/bash
# nvme_zone_csv.sh - the rows of probes/nvme_zone.bt's map as rows of the "# ztbp nvme v1" CSV, in completion
# order, without the two header lines (take them from the probe's BEGIN output): the one conversion of the map
# rows, used by the guest (vm/guest/probe-lib.sh, probe_extract) and by the host (the loop's rounds,
# ztbp/acquire/mapcsv.py map_rows_csv).
#
# USAGE:
#	bash probes/nvme_zone_csv.sh FILE...         bpftrace's output and mapdump.py's dump (lines other than
#	                                             "@rows[...]: (...)" are skipped; a missing FILE is no rows)
#	bash probes/nvme_zone_csv.sh --raw FILE...   files of vm/guest/mapdump.py --raw (formatted by its --text)
# Exit status: 0, or 1 when a row could not be converted (probes/nvme_zone.awk names the line on stderr; the
# other rows are still printed) or a --raw file could not be read.
set -o pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "${1:-}" = --raw ]; then
	shift
	python3 "$here/../vm/guest/mapdump.py" --text "$@" 2> >(grep -v '^mapdump: [0-9]* rows$' >&2)
else
	for f in "$@"; do [ ! -f "$f" ] || cat "$f"; done
fi | awk -f "$here/nvme_zone.awk" | LC_ALL=C sort -n -t, -k1,1 | cut -d, -f2-
