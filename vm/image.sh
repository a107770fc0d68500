#!/usr/bin/env bash
# Build the ZTBP guest image from Debian packages only: a Debian root file system made by mmdebstrap
# (--suite bookworm: Debian 12, Linux 6.1, bpftrace 0.17, the default; --suite trixie: Debian 13, Linux 6.12,
# bpftrace 0.23),
# turned into an ext4 image without mounting (mke2fs -d), plus the kernel and initrd taken out of it for
# QEMU's direct -kernel boot. The result is cached outside git under $ZTBP_CACHE (default ~/.cache/ztbp),
# in a folder named after the suite and a hash of the recipe (this file, the guest init, the suite and the
# package list), image-<suite>-<hash>: it is rebuilt only when the recipe changes, and one image per suite is
# kept. Prints the image folder on stdout as its last line.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${ZTBP_CACHE:-$HOME/.cache/ztbp}"
SUITES="bookworm trixie"
DEFAULT_SUITE="bookworm"
SUITE="${ZTBP_SUITE:-$DEFAULT_SUITE}"
MIRROR="http://deb.debian.org/debian"
SECURITY_MIRROR="http://deb.debian.org/debian-security"
IMAGE_MIB=2048          # ext4 image size (sparse file; the root file system uses about 700 MiB)
GUEST_INIT="$REPO/vm/guest/ztbp-init"
PACKAGES=(
	linux-image-amd64     # the guest kernel (6.1 on bookworm, 6.12 on trixie), with NVMe, ZNS, 9p and BPF support
	initramfs-tools       # initrd that loads virtio_blk for the root disk
	zstd                  # initramfs compression
	bpftrace              # the probes
	bpfcc-tools           # bcc's biosnoop & co.: the comparison of vm/bench-probe.sh (+python3-bpfcc)
	linux-headers-amd64   # bcc compiles its programs against the running kernel's headers (Debian has no kheaders)
	fio                   # the workloads (io_uring, zonemode=zbd)
	nvme-cli              # nvme zns report-zones, id-ns
	util-linux            # blkzone
	e2fsprogs             # mkfs.ext4 and filefrag (in bookworm's minbase, no longer in trixie's)
	kmod                  # modprobe (9p, NVMeVirt's module)
	btrfs-progs           # zoned btrfs experiments
	f2fs-tools            # zoned f2fs (mkfs.f2fs -m) for application captures
	rocksdb-tools         # db_bench (librocksdb) for application captures
	binutils              # nm/readelf: resolve mangled function names for uprobes
	procps                # ps, free
	coreutils
)

usage() {
	cat <<EOF
Usage: $0 [options]

Build (or reuse) the cached guest image and print its folder.

Options:
  -s, --suite SUITE  Debian suite: bookworm (Debian 12, the default) or trixie (Debian 13); ZTBP_SUITE
                  sets the default
  -f, --force     rebuild even if the cached image matches the recipe
  -p, --print     print the image folder the current recipe maps to and exit (no build)
  -h, --help      this text

Cache folder: $CACHE_DIR (set ZTBP_CACHE to move it)
Needs: mmdebstrap, e2fsprogs (mke2fs), zstd — install with: bash vm/install-deps.sh
EOF
}

log() { echo "image: $*" >&2; }
die() { echo "image: error: $*" >&2; exit 1; }

recipe_hash() {
	{
		cat "$REPO/vm/image.sh" "$GUEST_INIT"
		printf '%s\n' "$SUITE" "${PACKAGES[@]}"
	} | sha256sum | cut -c1-16
}

image_dir() { echo "$CACHE_DIR/image-$SUITE-$(recipe_hash)"; }

check_deps() {
	local missing=() tool
	for tool in mmdebstrap mke2fs; do
		command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
	done
	if [ "${#missing[@]}" -gt 0 ]; then
		die "missing ${missing[*]}; install the host packages with: bash vm/install-deps.sh (or: just deps)"
	fi
}

build_rootfs() {
	local rootfs="$1"
	local mode="root"
	[ "$(id -u)" -eq 0 ] || mode="unshare"
	log "mmdebstrap $SUITE (minbase + ${#PACKAGES[@]} packages) into a temporary folder; this takes a few minutes"
	# Only the package names go to mmdebstrap (strip the comments of PACKAGES).
	mmdebstrap \
		--mode="$mode" \
		--variant=minbase \
		--include="$(IFS=,; echo "${PACKAGES[*]}")" \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--customize-hook="copy-in $GUEST_INIT /sbin" \
		--customize-hook='chmod 755 "$1/sbin/ztbp-init"' \
		--customize-hook='echo ztbp-guest > "$1/etc/hostname"' \
		--customize-hook='printf "/dev/vda / ext4 rw 0 1\n" > "$1/etc/fstab"' \
		--customize-hook='mkdir -p "$1/ztbp/src" "$1/ztbp/out" "$1/ztbp/ctl"' \
		"$SUITE" "$rootfs" \
		"deb $MIRROR $SUITE main" \
		"deb $MIRROR $SUITE-updates main" \
		"deb $SECURITY_MIRROR $SUITE-security main" \
		2>&1 | sed -u 's/^/image:   /' >&2
}

make_image() {
	local rootfs="$1" out="$2"
	du -sm "$rootfs" | cut -f1 > "$out/rootfs-mib"
	log "root file system: $(cat "$out/rootfs-mib") MiB"
	log "mke2fs -d: ${IMAGE_MIB} MiB ext4 image (no mount needed)"
	mke2fs -q -F -t ext4 -L ztbp-root -d "$rootfs" "$out/rootfs.ext4" "${IMAGE_MIB}M" >&2
	cp "$rootfs"/boot/vmlinuz-* "$out/vmlinuz"
	cp "$rootfs"/boot/initrd.img-* "$out/initrd.img"
	# shellcheck disable=SC2016  # ${Package} is dpkg-query's format syntax, not a shell variable
	dpkg-query --admindir="$rootfs/var/lib/dpkg" -W -f='${Package} ${Version}\n' \
		linux-image-amd64 bpftrace bpfcc-tools fio nvme-cli util-linux > "$out/versions.txt"
	echo "$SUITE" > "$out/suite"
	(cd "$rootfs/boot" && ls vmlinuz-* | sed 's/^vmlinuz-//') > "$out/kernel-release"
}

build() {
	local dir tmp
	dir="$(image_dir)"
	check_deps
	mkdir -p "$CACHE_DIR"
	tmp="$(mktemp -d "$CACHE_DIR/build.XXXXXX")"
	# shellcheck disable=SC2064  # expand $tmp now: the trap must remove this build's folder
	trap "rm -rf '$tmp'" EXIT
	local start=$SECONDS
	build_rootfs "$tmp/rootfs"
	mkdir -p "$tmp/image"
	make_image "$tmp/rootfs" "$tmp/image"
	rm -rf "$dir"
	mv "$tmp/image" "$dir"
	log "built $(basename "$dir") in $((SECONDS - start)) s (kernel $(cat "$dir/kernel-release"))"
	# Keep one image per suite: older recipes of this suite are dead weight (about 1 GiB each), and so are
	# images named before the suite was part of the name (image-<hash>).
	find "$CACHE_DIR" -maxdepth 1 \( -name "image-$SUITE-*" -o -regex '.*/image-[0-9a-f]*' \) ! -path "$dir" \
		-exec rm -rf {} +
}

main() {
	local force=0 print=0
	while [ $# -gt 0 ]; do
		case "$1" in
			-s|--suite) SUITE="${2:-}"; shift ;;
			-f|--force) force=1 ;;
			-p|--print) print=1 ;;
			-h|--help) usage; return 0 ;;
			*) usage >&2; die "unknown option '$1'" ;;
		esac
		shift
	done
	case " $SUITES " in
		*" $SUITE "*) ;;
		*) die "unknown suite '$SUITE' (choose one of: $SUITES)" ;;
	esac
	local dir
	dir="$(image_dir)"
	[ "$print" -eq 1 ] && { echo "$dir"; return 0; }
	# One build of a suite at a time: a second caller (the test suite builds the images in the background while
	# the unit tests run) waits here, then finds the image built.
	mkdir -p "$CACHE_DIR"
	exec 9>"$CACHE_DIR/build-$SUITE.lock"
	if ! flock -n 9; then
		log "another build of the $SUITE image is running: waiting for it"
		flock 9
	fi
	if [ "$force" -eq 0 ] && [ -f "$dir/rootfs.ext4" ] && [ -f "$dir/vmlinuz" ] && [ -f "$dir/initrd.img" ]; then
		log "cached image $(basename "$dir") matches the recipe"
	else
		build
	fi
	echo "$dir"
}

main "$@"
