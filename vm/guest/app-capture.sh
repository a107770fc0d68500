#!/bin/bash
# Guest side of `ztbp capture-app` (an application on a file system on the emulated NVMe device): build the
# file system, start the streaming NVMe probe (with the submitting thread), the application-operation probe
# (probes/appops.bt, instantiated for the functions asked for) and the cache probe (probes/cachestat.bt), run the
# application's phases (db_bench: fill, then reads with direct I/O), stop the probes, record every file's layout
# (FIEMAP through filefrag, mapped to the namespace's byte offsets) and write the raw/ files of a run directory
# plus .capture/guest.env (the host turns it into meta.json). Probes run through probe-lib.sh (LOSS, STOP rules).
#
# Environment (all optional):
#   ZTBP_OUT         run directory (default /ztbp/out)
#   ZTBP_FS          btrfs (zoned, on /dev/nvme0n1; default), f2fs (zoned: metadata on the conventional
#                    namespace /dev/nvme0n2, data on the zoned one) or ext4 (on /dev/nvme0n2, the baseline)
#   ZTBP_APP         rocksdb (the only application so far: db_bench of Debian's rocksdb-tools)
#   ZTBP_KEYS        keys written by the fill (default 20000)
#   ZTBP_VALUE       value size in bytes (default 400)
#   ZTBP_READS       Get operations of the readrandom phase (default 2000)
#   ZTBP_CACHE       RocksDB block cache in bytes (default 65536; index and filter blocks live in it too)
#   ZTBP_DURATION    seconds of a readwhilewriting phase after readrandom (default 0: none)
#   ZTBP_BUFFERED    1: reads through the page cache (no O_DIRECT) - the buffered counterpart of a run
#   ZTBP_LIBRARY     the binary or library the functions are resolved in (default: db_bench's librocksdb)
#   ZTBP_FUNCTIONS   the traced operations, "OP=FUNCTION ..." (default: get and write of RocksDB's DBImpl);
#                    FUNCTION is a demangled name prefix ("rocksdb::DBImpl::GetImpl") or a symbol
#   ZTBP_STATUS      bpftrace expression of the status (default (int64)*(uint8 *)retval: RocksDB's Status code)
# Progress lines start with "ZTBP:".
set -uo pipefail

# shellcheck source=vm/guest/probe-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/probe-lib.sh"   # also OUT, DEV, STOP_FILE, SRC (the repository)
settings FS=btrfs APP=rocksdb KEYS=20000 VALUE=400 READS=2000 CACHE=65536 DURATION=0 BUFFERED=0 \
	FUNCTIONS="get=rocksdb::DBImpl::GetImpl write=rocksdb::DBImpl::WriteImpl" \
	STATUS_EXPR:STATUS="(int64)*(uint8 *)retval"
stack_namespaces            # ZNS, CONV, MNT
DB="$MNT/db"
NVME_PROBE="$SRC/probes/nvme_zone_stream.bt"
APPOPS_PROBE="$SRC/probes/appops.bt"
CACHE_PROBE="$SRC/probes/cachestat.bt"
FILES_VERSION="# ztbp files v1"
FILES_HEADER="path,file_bytes,extent,logical_bytes,fs_bytes,length_bytes,nsid,dev_bytes,flags"

TMP=""
LIB=""
STATUS="complete"

usage() {
	cat <<EOF
Usage: ZTBP_FS=btrfs|f2fs|ext4 ZTBP_KEYS=N ZTBP_READS=N ... bash $0

Run in the guest by \`ztbp capture-app\` (see its --help); the environment variables are listed at the top
of this script. Writes OUT/raw/{nvme,appops,cachestat,files}.csv, db_bench-*.txt, phases.csv, zones.txt
and OUT/.capture/guest.env.
EOF
}

# /proc/uptime "696.30" -> 696300000000 ns as text (mawk's %d stops at 2^31)
uptime_ns() { awk '{split($1, a, "."); printf "%s%s0000000\n", a[1], a[2]}' /proc/uptime; }

# ---- the file system --------------------------------------------------------------------------------------

prepare_fs() {
	record_device "$ZNS" || die "$ZNS is not a zoned namespace"
	modprobe btrfs; modprobe f2fs; modprobe ext4
	mkdir -p "$MNT"
	case "$FS" in
		btrfs)
			blkzone reset "$ZNS" || die "blkzone reset failed"
			mkfs.btrfs -f -O zoned -m single -d single "$ZNS" > "$TMP/mkfs.txt" 2>&1 ||
				die "mkfs.btrfs -O zoned failed: $(tr '\n' ' ' < "$TMP/mkfs.txt")"
			mount -t btrfs "$ZNS" "$MNT" || die "mount btrfs failed: $(dmesg | tail -3 | tr '\n' ' ')"
			info fs_device "$(basename "$ZNS")" ;;
		f2fs)
			[ -b "$CONV" ] || die "$CONV missing: f2fs zoned keeps its metadata on a conventional namespace (--conv-ns)"
			blkzone reset "$ZNS" || die "blkzone reset failed"
			mkfs.f2fs -f -m -c "$ZNS" "$CONV" > "$TMP/mkfs.txt" 2>&1 ||
				die "mkfs.f2fs -m failed: $(tr '\n' ' ' < "$TMP/mkfs.txt")"
			mount -t f2fs "$CONV" "$MNT" || die "mount f2fs failed: $(dmesg | tail -3 | tr '\n' ' ')"
			info fs_device "$(basename "$CONV")+$(basename "$ZNS")" ;;
		ext4)
			[ -b "$CONV" ] || die "$CONV missing: ext4 runs on the conventional namespace (--conv-ns)"
			mkfs.ext4 -q -F "$CONV" > "$TMP/mkfs.txt" 2>&1 || die "mkfs.ext4 failed"
			mount -t ext4 "$CONV" "$MNT" || die "mount ext4 failed"
			info fs_device "$(basename "$CONV")" ;;
		*) die "ZTBP_FS must be btrfs, f2fs or ext4, not '$FS'" ;;
	esac
	info fs "$FS"
	say "stage file system $FS mounted at $MNT"
}

# ---- the application and its functions ---------------------------------------------------------------------

find_library() { # the binary or library the functions live in: ZTBP_LIBRARY, else db_bench's librocksdb
	command -v db_bench > /dev/null || die "db_bench missing: the guest image needs rocksdb-tools (vm/image.sh)"
	if [ -n "${ZTBP_LIBRARY:-}" ]; then
		[ -f "$ZTBP_LIBRARY" ] || die "ZTBP_LIBRARY $ZTBP_LIBRARY is not a file in the guest"
		LIB="$(realpath "$ZTBP_LIBRARY")"
	else
		LIB="$(ldd "$(command -v db_bench)" | awk '/librocksdb/ {print $3}')"
		[ -n "$LIB" ] && LIB="$(realpath "$LIB")"
		[ -f "$LIB" ] || die "db_bench is not linked against a librocksdb shared library"
	fi
	info app_binary "$(command -v db_bench)"
	info app_library "$LIB"
	info app_version "$(dpkg-query -W -f='${Package} ${Version}' rocksdb-tools 2>/dev/null)"
}

resolve_symbols_fast() { # FUNCTIONS -> $TMP/functions.txt "OP SYMBOL DEMANGLED" (one c++filt pass for the library)
	# the dynamic symbols (a library's exports), and the full table when the file has one (a binary's own functions)
	{ nm -D --defined-only "$LIB"; nm --defined-only "$LIB"; } 2> /dev/null | awk '$2 ~ /^[TtWw]$/ {print $3}' |
		sort -u > "$TMP/syms.txt"
	c++filt < "$TMP/syms.txt" > "$TMP/demangled.txt"
	paste -d '\t' "$TMP/syms.txt" "$TMP/demangled.txt" > "$TMP/symtab.txt"
	: > "$TMP/functions.txt"
	local pair op name matches
	for pair in $FUNCTIONS; do
		op="${pair%%=*}"; name="${pair#*=}"
		matches="$(awk -F '\t' -v n="$name" '$1 == n || index($2, n "(") == 1 {print $1}' "$TMP/symtab.txt")"
		[ -n "$matches" ] || die "no function $name in $LIB"
		[ "$(echo "$matches" | wc -l)" -eq 1 ] || die "$name is ambiguous in $LIB: $(echo "$matches" | tr '\n' ' ')"
		printf '%s\t%s\t%s\n' "$op" "$matches" "$(awk -F '\t' -v s="$matches" '$1 == s {print $2}' "$TMP/symtab.txt")" \
			>> "$TMP/functions.txt"
		info "appops_fn_$op" "$matches"
	done
}

generate_appops() { # probes/appops.bt with its OP-TEMPLATE block repeated per function -> $TMP/appops.bt
	local i=1 op sym _dem
	awk '/OP-TEMPLATE-BEGIN/ {exit} {print}' "$APPOPS_PROBE" > "$TMP/appops.bt"
	while IFS=$'\t' read -r op sym _dem; do
		awk '/OP-TEMPLATE-BEGIN/ {on = 1; next} /OP-TEMPLATE-END/ {on = 0} on' "$APPOPS_PROBE" |
			sed -e "s|__BINARY__|$LIB|g" -e "s|__SYMBOL__|$sym|g" -e "s|__OP__|$op|g" \
				-e "s|__INDEX__|$i|g" -e "s|__STATUS__|$STATUS_EXPR|g" >> "$TMP/appops.bt"
		i=$((i + 1))
	done < "$TMP/functions.txt"
	awk '/OP-TEMPLATE-END/ {on = 1; next} on' "$APPOPS_PROBE" >> "$TMP/appops.bt"
}

db_bench_run() { # PHASE BENCHMARKS [FLAGS...]: one db_bench process, its output and its time window
	local phase="$1" benchmarks="$2" t0 t1 rc=0
	shift 2
	say "stage phase $phase: db_bench --benchmarks=$benchmarks"
	t0="$(uptime_ns)"
	db_bench --db="$DB" --benchmarks="$benchmarks" --num="$KEYS" --value_size="$VALUE" --key_size=16 \
		--cache_size="$CACHE" --cache_index_and_filter_blocks=true --bloom_bits=10 --threads=1 \
		--write_buffer_size=$((1 << 20)) --target_file_size_base=$((1 << 20)) --max_bytes_for_level_base=$((4 << 20)) \
		--compression_type=none --statistics=1 --histogram=1 --seed=42 "$@" \
		> "$TMP/db_bench-$phase.txt" 2>&1 || rc=$?
	t1="$(uptime_ns)"
	echo "$phase,$t0,$t1,$rc" >> "$TMP/phases.csv"
	[ "$rc" -eq 0 ] || die "db_bench $phase failed (status $rc): $(tail -3 "$TMP/db_bench-$phase.txt" | tr '\n' ' ')"
	say "stage phase $phase done: $(grep -E "^${benchmarks%%,*} +:" "$TMP/db_bench-$phase.txt" | head -n 1)"
}

run_rocksdb() {
	local direct=(--use_direct_reads=true)
	[ "$BUFFERED" = 1 ] && direct=(--use_direct_reads=false)
	echo "phase,start_ns,end_ns,status" > "$TMP/phases.csv"
	# The fill ends with its memtable flushed and every compaction it started finished, and readrandom runs with
	# automatic compaction off: otherwise reopening the database resumes the fill's compactions during the reads,
	# the Gets read files those compactions then delete, and the layout taken after the run (FIEMAP) cannot name
	# them (measured on ext4: 5,786 of 6,290 reads outside every file left). readwhilewriting keeps compaction on.
	db_bench_run fill fillrandom,flush,waitforcompaction --disable_wal=false
	sync; echo 3 > /proc/sys/vm/drop_caches
	db_bench_run readrandom readrandom --use_existing_db=true --reads="$READS" --disable_auto_compactions=true \
		"${direct[@]}"
	if [ "$DURATION" -gt 0 ]; then
		db_bench_run readwhilewriting readwhilewriting --use_existing_db=true --duration="$DURATION" "${direct[@]}"
	fi
}

stop_cachestat() { # a row a second: its output never stops growing, so no drain (probe_stop would wait for one)
	[ -n "${PROBE_PID[cachestat]:-}" ] || return 0
	local misses
	misses="$(recursion_misses "${PROBE_PID[cachestat]}")"
	probe_signal_until_exit cachestat
	probe_extract cachestat
	probe_account cachestat "$misses"
}

# ---- the files' layout ------------------------------------------------------------------------------------

btrfs_chunks() { # the chunk tree: "logical length stripe0_offset" per chunk (btrfs FIEMAP gives logical addresses)
	btrfs inspect-internal dump-tree -t chunk "$ZNS" 2>/dev/null | awk '
		/CHUNK_ITEM/ {for (i = 1; i <= NF; i++) if ($i == "CHUNK_ITEM") {l = $(i + 1); sub(/\)/, "", l)}; len = ""}
		/^[ \t]+length / && l != "" {len = $2}
		/stripe 0 devid/ && l != "" {print l, len, $NF; l = ""}'
}

f2fs_devices() { # "dev first_block last_block" of f2fs's two devices (4 KiB blocks of the file system's address space)
	if grep -q 'Device\[[0-9]*\] *:' "$TMP/mkfs.txt"; then # printed by some mkfs.f2fs versions
		sed -n 's/.*Device\[[0-9]*\] *: *\([^ ]*\) blkaddr = \([0-9a-f]*\)--\([0-9a-f]*\).*/\1 \2 \3/p' "$TMP/mkfs.txt" |
			while read -r d a b; do echo "$d $((16#$a)) $((16#$b))"; done
		return
	fi
	# mkfs.f2fs 1.15 (Debian 12) does not print them: its layout, computed. The first device holds the zone-aligned
	# segment0 ("zone aligned segment0 blkaddr: N") and whole segments (512 blocks) after it; the second device
	# follows at the next block, in whole segments.
	local seg=512 seg0 b0 b1 end0
	seg0="$(sed -n 's/.*segment0 blkaddr: \([0-9]*\).*/\1/p' "$TMP/mkfs.txt")"
	[ -n "$seg0" ] || { say "warning: no segment0 in mkfs.f2fs's output: files.csv keeps file-system offsets"; return; }
	b0=$(( $(blockdev --getsize64 "$CONV") / 4096 )); b1=$(( $(blockdev --getsize64 "$ZNS") / 4096 ))
	end0=$(( (b0 - seg0) / seg * seg + seg0 - 1 ))
	echo "$CONV 0 $end0"
	echo "$ZNS $((end0 + 1)) $((end0 + b1 / seg * seg))"
}

record_files() { # FIEMAP of every file of the application's folder -> $TMP/files.csv (probes/FORMAT.md)
	sync
	local map="" nsid_fs=2
	case "$FS" in
		btrfs) btrfs_chunks > "$TMP/map.txt"; map=btrfs; nsid_fs=1 ;;
		f2fs) f2fs_devices > "$TMP/map.txt"; map=f2fs ;;
		ext4) : > "$TMP/map.txt" ;;
	esac
	cp "$TMP/map.txt" "$TMP/fsmap.txt"
	printf '%s\n%s\n' "$FILES_VERSION" "$FILES_HEADER" > "$TMP/files.csv"
	local f n=0
	while IFS= read -r -d '' f; do
		n=$((n + 1))
		filefrag -v -b4096 "$f" 2>/dev/null | awk -v path="${f#"$DB"/}" -v size="$(stat -c %s "$f")" \
			-v map="$map" -v nsid_fs="$nsid_fs" -v zns="$ZNS" -v mapfile="$TMP/map.txt" '
			BEGIN {
				while ((getline line < mapfile) > 0) {
					split(line, a, " "); m++; m1[m] = a[1]; m2[m] = a[2]; m3[m] = a[3]
				}
			}
			/^ *[0-9]+:/ {
				gsub(/\.\./, " "); gsub(/:/, " ")
				ext = $1; lo = $2 * 4096; ph = $4 * 4096; len = $6 * 4096
				flags = ""; for (i = 7; i <= NF; i++) if ($i ~ /[a-z]/) flags = flags (flags ? "|" : "") $i
				sub(/,$/, "", flags); gsub(/,/, "|", flags)
				nsid = nsid_fs; dev = ph
				if (map == "btrfs") {
					dev = -1
					for (i = 1; i <= m; i++) if (ph >= m1[i] && ph < m1[i] + m2[i]) dev = m3[i] + ph - m1[i]
				} else if (map == "f2fs") {
					for (i = 1; i <= m; i++) if (ph / 4096 >= m2[i] && ph / 4096 <= m3[i]) {
						nsid = (m1[i] == zns) ? 1 : 2; dev = ph - m2[i] * 4096
					}
				}
				printf "%s,%.0f,%d,%.0f,%.0f,%.0f,%d,%.0f,%s\n", path, size, ext, lo, ph, len, nsid, dev, flags
			}' >> "$TMP/files.csv"
	done < <(find "$DB" -type f -print0)
	info files_seen "$n"
	say "stage files: $n files, $(($(wc -l < "$TMP/files.csv") - 2)) extents"
}

# ---- run ---------------------------------------------------------------------------------------------------

save_outputs() {
	local name
	save_probe_files nvme appops cachestat
	cp "$TMP"/db_bench-*.txt "$OUT/raw/" 2>/dev/null
	for name in files.csv phases.csv zones.txt fsmap.txt mkfs.txt functions.txt appops.bt; do
		[ -f "$TMP/$name" ] && cp "$TMP/$name" "$OUT/raw/$name"
	done
	[ -f "$OUT/raw/appops.bt" ] && mv "$OUT/raw/appops.bt" "$OUT/raw/appops-generated.bt"
	save_status
}

main() {
	case "${1:-}" in -h|--help) usage; return 0 ;; esac
	[ "$APP" = rocksdb ] || { echo "ZTBP_APP must be rocksdb" >&2; return 2; }
	TMP="$(mktemp -d /tmp/ztbp-app.XXXXXX)"
	: > "$TMP/guest.env"
	trap capture_on_exit EXIT
	say "stage booted $(cut -d' ' -f1 /proc/uptime) s"
	record_versions
	find_library
	resolve_symbols_fast
	generate_appops
	prepare_fs
	probe_start nvme "$NVME_PROBE" 0 || die "the NVMe probe did not start"
	probe_start appops "$TMP/appops.bt" 0 || die "the application-operation probe did not start"
	info probe_appops_script "probes/appops.bt"   # instantiated as raw/appops-generated.bt
	probe_start cachestat "$CACHE_PROBE" 0 || die "the cache probe did not start"
	local t0
	t0="$(date +%s.%N)"
	run_rocksdb
	info workload_s "$(echo "$(date +%s.%N) $t0" | awk '{printf "%.3f", $1 - $2}')"
	probe_stop appops
	stop_cachestat
	probe_stop nvme
	record_files
	blkzone report "$ZNS" > "$TMP/zones.txt"
	say "stage saving the run"
}

main "$@"
