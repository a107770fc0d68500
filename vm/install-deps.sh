#!/usr/bin/env bash
# Install the Debian packages the workbench needs on the host: QEMU and mmdebstrap for the VM path,
# clang for the ioctl helper's fuzz target, Chromium for the browser test of the reports. Idempotent:
# installs only what is missing. Needs root (or says what is missing and to run it as root).
# On Debian 12 it adds bookworm-backports to apt's sources and takes QEMU 10 from there (below).
#
# Another apt or dpkg may hold the package manager's locks (a fresh Debian machine often runs
# unattended-upgrades at first boot): the script then says which process holds which lock and waits for it,
# up to APT_LOCK_TIMEOUT seconds in all, instead of failing at once with apt's exit status 100.
set -euo pipefail

PACKAGES=(
	qemu-system-x86      # the VM
	qemu-utils           # qemu-img
	mmdebstrap           # guest root file system from Debian packages
	e2fsprogs            # mke2fs -d: ext4 image without mounting
	fakeroot             # run mmdebstrap hooks without privileges where needed
	zstd                 # image cache compression
	clang                # ztbp-ctl fuzz target (libFuzzer) and sanitizer builds
	libclang-rt-14-dev   # libFuzzer / ASan / UBSan runtimes for clang 14
	linux-libc-dev       # uapi headers for ztbp-ctl (linux/nvme_ioctl.h, linux/blkzoned.h)
	make                 # builds ztbp-ctl (just build) and its test, ASan and fuzz variants
	gcc                  # ztbp-ctl's default compiler and its ASan/UBSan test build
	libc6-dev            # libc headers for ztbp-ctl
	kmod                 # modinfo: ../shared/nvmevirt/build.sh checks the vermagic of the NVMeVirt module it builds
	fio                  # tests/test_workload.py runs the workloads' job files on a null engine (seeds)
	chromium             # headless browser test of the HTML reports (tests/test_report_browser.py)
	chromium-driver      # chromedriver, driven by selenium in that test
	strace               # tests/test_ztbp_ctl.py: no ioctl reaches a device that is not NVMe (strace -f -e trace=ioctl)
)
# QEMU 10 or newer where the distribution only has an older one: on Debian 12 (bookworm), from bookworm-backports.
# Against bookworm's QEMU 7.2 on the project's 2-core test machine, the test suite's guests took 19 % less CPU
# (1,285-1,571 s in six fresh-clone runs of the README test line, against 1,709-1,935 s in three).
# ZTBP_QEMU_BACKPORTS=0 keeps the system's QEMU.
QEMU_MIN_VERSION="1:10"
BACKPORTS_SUITE="bookworm-backports"
BACKPORTS_SOURCES="${ZTBP_BACKPORTS_SOURCES:-/etc/apt/sources.list.d/ztbp-bookworm-backports.sources}"
OS_RELEASE="${ZTBP_OS_RELEASE:-/etc/os-release}"
BACKPORTS_PACKAGES=(qemu-system-x86 qemu-utils)
# The locks apt-get update and apt-get install take (ZTBP_APT_LOCKS: a space-separated list, for tests).
read -r -a APT_LOCKS <<< "${ZTBP_APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}"
APT_LOCK_TIMEOUT="${ZTBP_APT_LOCK_TIMEOUT:-600}"   # seconds to wait for them in all
LOCK_POLL=2                                         # seconds between looks
LOCK_REPORT_EVERY=30                                # seconds between "still waiting" lines
APT_STARTED=$SECONDS

usage() {
	cat <<EOF
Usage: $0

Install the host packages the workbench needs (apt-get, as root): ${PACKAGES[*]}
On Debian 12, ${BACKPORTS_PACKAGES[*]} come from $BACKPORTS_SUITE (QEMU 10); ZTBP_QEMU_BACKPORTS=0 keeps the
system's QEMU.
Waits up to ${APT_LOCK_TIMEOUT} s (ZTBP_APT_LOCK_TIMEOUT) for another apt or dpkg to release its locks.
EOF
}

missing_packages() {
	local p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
	done
}

os_codename() {
	# VERSION_CODENAME from os-release, empty when it has none.
	sed -n 's/^VERSION_CODENAME=//p' "$OS_RELEASE" 2>/dev/null | tr -d '"' | head -n 1
}

qemu_from_backports() {
	# Succeeds when QEMU should come from bookworm-backports: Debian 12, ZTBP_QEMU_BACKPORTS not 0, and
	# qemu-system-x86 absent or older than QEMU_MIN_VERSION (QEMU_VERSION stands in for the installed one, for tests).
	[ "${ZTBP_QEMU_BACKPORTS:-1}" != 0 ] || return 1
	[ "$(os_codename)" = bookworm ] || return 1
	local v="${QEMU_VERSION-$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null || true)}"
	[ -z "$v" ] || dpkg --compare-versions "$v" lt "$QEMU_MIN_VERSION"
}

backports_configured() {
	# Some apt source already names the suite (ZTBP_BACKPORTS_SOURCES, where tests write theirs, may lie elsewhere).
	grep -rqs "$BACKPORTS_SUITE" /etc/apt/sources.list /etc/apt/sources.list.d "$BACKPORTS_SOURCES"
}

write_backports_sources() {
	# The suite as a deb822 file, signed by Debian's archive key (what bookworm's own sources use), written atomically.
	local tmp="$BACKPORTS_SOURCES.tmp.$$"
	printf '%s\n' \
		"# Added by the project's vm/install-deps.sh for QEMU 10 (apt-get install -t $BACKPORTS_SUITE qemu-system-x86)." \
		"Types: deb" "URIs: http://deb.debian.org/debian" "Suites: $BACKPORTS_SUITE" "Components: main" \
		"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" >"$tmp"
	mv -f "$tmp" "$BACKPORTS_SOURCES"
}

without() {
	# The words of $2.. that are not in the space-separated list $1, one per line.
	local drop=" $1 " p
	shift
	for p in "$@"; do [[ "$drop" == *" $p "* ]] || echo "$p"; done
}

lock_holders() {
	# "FILE held by COMMAND (pid N)" for each lock file some process holds a lock on (/proc/locks, by inode;
	# apt and dpkg take fcntl locks, which is what /proc/locks lists).
	local f inode pid
	for f in "${APT_LOCKS[@]}"; do
		[ -e "$f" ] || continue
		inode="$(stat -c %i "$f")"
		for pid in $(awk -v inode="$inode" '$2 != "->" { n = split($6, d, ":"); if (d[n] == inode) print $5 }' /proc/locks | sort -u); do
			if [ "$pid" = -1 ]; then
				echo "$f held by an open file description lock (its process is not listed)"
			else
				echo "$f held by $(cat "/proc/$pid/comm" 2>/dev/null || echo "a process that just ended") (pid $pid)"
			fi
		done
	done
}

wait_for_apt_locks() {
	# Until no process holds an apt or dpkg lock, or APT_LOCK_TIMEOUT s since the script started.
	local holders waited=0 reported=-$LOCK_REPORT_EVERY
	while holders="$(lock_holders)"; [ -n "$holders" ]; do
		if [ $((SECONDS - APT_STARTED)) -ge "$APT_LOCK_TIMEOUT" ]; then
			echo "deps: error: the package manager is still busy after ${APT_LOCK_TIMEOUT} s: $(echo "$holders" | paste -sd ';' -)." >&2
			echo "deps: let it finish (a fresh Debian machine runs unattended-upgrades at first boot) and run 'just deps' again," \
				"or wait longer with ZTBP_APT_LOCK_TIMEOUT=SECONDS" >&2
			return 1
		fi
		if [ $((waited - reported)) -ge "$LOCK_REPORT_EVERY" ]; then
			echo "deps: waiting for another package manager to finish: $(echo "$holders" | paste -sd ';' -)" \
				"(up to $((APT_LOCK_TIMEOUT - (SECONDS - APT_STARTED))) s more)" >&2
			reported=$waited
		fi
		sleep "$LOCK_POLL"
		waited=$((waited + LOCK_POLL))
	done
}

apt_get() {
	# apt-get ARGS once the locks are free; if another apt took them in between (exit 100 with a holder), again.
	local rc left
	while :; do
		wait_for_apt_locks || return 1
		left=$((APT_LOCK_TIMEOUT - (SECONDS - APT_STARTED)))
		rc=0
		apt-get -o "DPkg::Lock::Timeout=$((left > 0 ? left : 0))" "$@" || rc=$?
		if [ "$rc" -eq 100 ] && [ -n "$(lock_holders)" ] && [ $((SECONDS - APT_STARTED)) -lt "$APT_LOCK_TIMEOUT" ]; then
			continue
		fi
		return "$rc"
	done
}

main() {
	case "${1:-}" in -h|--help) usage; return 0 ;; esac
	local missing backports=()
	mapfile -t missing < <(missing_packages)
	if qemu_from_backports; then
		backports=("${BACKPORTS_PACKAGES[@]}")
		mapfile -t missing < <(without "${backports[*]}" "${missing[@]}")
	fi
	if [ "${#missing[@]}" -eq 0 ] && [ "${#backports[@]}" -eq 0 ]; then
		echo "deps: all host packages present"
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		[ "${#missing[@]}" -eq 0 ] || echo "deps: missing packages: ${missing[*]}" >&2
		[ "${#backports[@]}" -eq 0 ] || echo "deps: QEMU is older than 10 or absent: ${backports[*]} from" \
			"$BACKPORTS_SUITE (or keep the system's QEMU with ZTBP_QEMU_BACKPORTS=0)" >&2
		echo "deps: run as root: bash vm/install-deps.sh (or: just deps)" >&2
		return 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	if [ "${#backports[@]}" -gt 0 ] && ! backports_configured; then
		write_backports_sources
		echo "deps: added $BACKPORTS_SUITE to apt's sources: $BACKPORTS_SOURCES"
	fi
	apt_get update -qq
	if [ "${#missing[@]}" -gt 0 ]; then
		echo "deps: installing ${missing[*]}"
		apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
		echo "deps: installed ${missing[*]}"
	fi
	if [ "${#backports[@]}" -gt 0 ]; then
		echo "deps: installing ${backports[*]} from $BACKPORTS_SUITE"
		apt_get install -y -qq --no-install-recommends -t "$BACKPORTS_SUITE" "${backports[@]}" >/dev/null
		echo "deps: installed QEMU $(dpkg-query -W -f='${Version}' qemu-system-x86)"
	fi
}

# Sourced by tests/test_install_deps.py for its functions; run directly to install.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	main "$@"
fi
