/* The device: open, probe (NVMe? zoned? geometry) and send the vendor admin command.
 *
 * Whether a device is NVMe is decided from its sysfs entry before any ioctl: an NVMe ioctl number sent to
 * another driver may mean something else there. Block devices (/dev/nvme0n1) are then probed with the block
 * layer's zone ioctls; NVMe character devices (the generic /dev/ng0n1 or the controller /dev/nvme0) with NVMe
 * Identify admin commands, which only read. The only command with the ZTBP opcode that can leave here is one
 * whose cdw10 is a valid sub-command. System calls go through zsys_* (sys.c), so the fuzz target can stub
 * them. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <linux/blkzoned.h>
#include <linux/fs.h>
#include <linux/nvme_ioctl.h>

#include "ztbp_ctl.h"

#define IDENTIFY_OPCODE 0x06
#define IDENTIFY_BYTES 4096 /* Identify data: one page */
#define CNS_NAMESPACE 0x00
#define CNS_CONTROLLER 0x01
#define CNS_CS_NAMESPACE 0x05
#define CSI_ZNS 0x02
#define IDENTIFY_TIMEOUT_MS 5000u

static int perm_errno(int e)
{
	return e == EACCES || e == EPERM;
}

static void open_error(struct zerr *err, const char *path, int e, const char *what)
{
	if (perm_errno(e))
		zerr_set(err, EX_PERMISSION, "%s: permission denied %s: ztbp-ctl needs root", path, what);
	else
		zerr_set(err, EX_DEV_OPEN, "%s: %s: %s", path, what, strerror(e));
}

int sysfs_path_is_nvme(const char *real)
{
	const char *p = real;

	while (p && *p) {
		const char *end;
		size_t n;

		while (*p == '/')
			p++;
		end = strchr(p, '/');
		n = end ? (size_t)(end - p) : strlen(p);
		if ((n == 4 && strncmp(p, "nvme", 4) == 0) || (n == 14 && strncmp(p, "nvme-subsystem", 14) == 0))
			return 1;
		p = end;
	}
	return 0;
}

/* Whether the device st describes is NVMe, by its sysfs entry (nothing is sent to it). */
static int nvme_by_sysfs(const struct stat *st)
{
	char link[64], real[PATH_MAX];

	snprintf(link, sizeof link, "/sys/dev/%s/%u:%u", S_ISBLK(st->st_mode) ? "block" : "char",
		 major(st->st_rdev), minor(st->st_rdev));
	return zsys_realpath(link, real) != NULL && sysfs_path_is_nvme(real);
}

int device_open(const char *path, struct device *d, struct zerr *err)
{
	struct stat st;

	memset(d, 0, sizeof *d);
	d->fd = -1;
	d->path = path;
	if (zsys_stat(path, &st)) {
		open_error(err, path, errno, "looking up the device");
		return -1;
	}
	if (!S_ISBLK(st.st_mode) && !S_ISCHR(st.st_mode)) {
		zerr_set(err, EX_NOT_DEVICE,
			 "%s is not a block or character device (give e.g. /dev/nvme0n1, /dev/ng0n1 or /dev/nvme0)",
			 path);
		return -1;
	}
	d->fd = zsys_open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (d->fd < 0) {
		open_error(err, path, errno, "opening the device");
		return -1;
	}
	if (zsys_fstat(d->fd, &st) || (!S_ISBLK(st.st_mode) && !S_ISCHR(st.st_mode))) {
		zerr_set(err, EX_NOT_DEVICE, "%s is not a block or character device", path);
		device_close(d);
		return -1;
	}
	d->kind = S_ISBLK(st.st_mode) ? DEV_BLOCK : DEV_OTHER;
	d->is_nvme = nvme_by_sysfs(&st);
	return 0;
}

void device_close(struct device *d)
{
	if (d->fd >= 0)
		zsys_close(d->fd);
	d->fd = -1;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* A buffer for Identify data: one whole, page-aligned 4 KiB page. With a buffer that starts inside a page the
 * kernel hands the device two data pointers (PRP1 at an offset, PRP2 for the rest); a device that writes all
 * 4,096 bytes from PRP1 (NVMeVirt's Identify handlers do) then overwrites the physically next page, whatever
 * it holds. Measured: with malloc'd buffers, loops on NVMeVirt crashed guest programs on zeroed or foreign
 * memory; with page-aligned ones they did not. NULL when out of memory. */
static unsigned char *identify_buffer(void)
{
	void *p = NULL;

	return posix_memalign(&p, IDENTIFY_BYTES, IDENTIFY_BYTES) == 0 ? p : NULL;
}

/* An Identify admin command into buf (an identify_buffer()). Returns the ioctl result: 0, an NVMe status > 0,
 * or -1 with errno (EINVAL for a buffer that is not page-aligned). */
static int identify(int fd, uint8_t cns, uint8_t csi, uint32_t nsid, unsigned char *buf)
{
	struct nvme_admin_cmd c;

	if ((uintptr_t)buf % IDENTIFY_BYTES != 0) {
		errno = EINVAL;
		return -1;
	}
	memset(&c, 0, sizeof c);
	memset(buf, 0, IDENTIFY_BYTES);
	c.opcode = IDENTIFY_OPCODE;
	c.nsid = nsid;
	c.addr = (uint64_t)(uintptr_t)buf;
	c.data_len = IDENTIFY_BYTES;
	c.cdw10 = cns;
	c.cdw11 = (uint32_t)csi << 24;
	c.timeout_ms = IDENTIFY_TIMEOUT_MS;
	return zsys_ioctl(fd, NVME_IOCTL_ADMIN_CMD, &c);
}

static int probe_block(struct device *d, int want_report, struct zerr *err)
{
	unsigned int zone_sectors = 0, nr = 0;
	int id, lba = 0;

	d->source = "blkzoned";
	id = zsys_ioctl(d->fd, NVME_IOCTL_ID, NULL);
	if (id > 0)
		d->nsid = (uint32_t)id;
	if (zsys_ioctl(d->fd, BLKGETZONESZ, &zone_sectors) < 0 || zone_sectors == 0)
		return 0; /* not zoned */
	if (zsys_ioctl(d->fd, BLKGETNRZONES, &nr) < 0) {
		zerr_set(err, EX_GEOMETRY, "%s: BLKGETNRZONES failed: %s", d->path, strerror(errno));
		return -1;
	}
	if (zsys_ioctl(d->fd, BLKSSZGET, &lba) < 0 || lba < 512) {
		zerr_set(err, EX_GEOMETRY, "%s: BLKSSZGET (logical block size) failed", d->path);
		return -1;
	}
	d->zoned = 1;
	d->nr_zones = nr;
	d->lba_bytes = (uint32_t)lba;
	d->zone_size_bytes = (uint64_t)zone_sectors * 512u;
	d->zone_size_lba = d->zone_size_bytes / d->lba_bytes;
	if (!want_report || nr == 0)
		return 0;

	{
		const unsigned batch = 256;
		size_t size = sizeof(struct blk_zone_report) + batch * sizeof(struct blk_zone);
		struct blk_zone_report *rep = malloc(size);
		uint64_t sector = 0, end = (uint64_t)nr * zone_sectors;
		uint32_t seen = 0;

		if (!rep) {
			zerr_set(err, EX_INTERNAL, "out of memory");
			return -1;
		}
		d->zone_cap_min_sectors = UINT64_MAX;
		d->capacity_reported = 1;
		while (sector < end) {
			unsigned i;
			struct blk_zone *z;

			memset(rep, 0, size);
			rep->sector = sector;
			rep->nr_zones = batch;
			if (zsys_ioctl(d->fd, BLKREPORTZONE, rep) < 0) {
				zerr_set(err, EX_GEOMETRY, "%s: BLKREPORTZONE at sector %llu failed: %s", d->path,
					 (unsigned long long)sector, strerror(errno));
				free(rep);
				return -1;
			}
			if (rep->nr_zones == 0)
				break;
			z = (struct blk_zone *)(void *)(rep + 1);
			for (i = 0; i < rep->nr_zones && i < batch; i++) {
				uint64_t cap = (rep->flags & BLK_ZONE_REP_CAPACITY) ? z[i].capacity : z[i].len;
				if (!(rep->flags & BLK_ZONE_REP_CAPACITY))
					d->capacity_reported = 0;
				if (cap < d->zone_cap_min_sectors)
					d->zone_cap_min_sectors = cap;
				if (cap > d->zone_cap_max_sectors)
					d->zone_cap_max_sectors = cap;
				if (z[i].type == BLK_ZONE_TYPE_CONVENTIONAL)
					d->conventional_zones++;
				seen++;
				if (z[i].len == 0) {
					zerr_set(err, EX_GEOMETRY, "%s: BLKREPORTZONE returned a zone of length 0", d->path);
					free(rep);
					return -1;
				}
				sector = z[i].start + z[i].len;
			}
		}
		free(rep);
		if (seen != nr) {
			zerr_set(err, EX_GEOMETRY, "%s: BLKREPORTZONE reported %u zones, BLKGETNRZONES %u", d->path,
				 seen, nr);
			return -1;
		}
		d->have_report = 1;
	}
	return 0;
}

static int probe_char(struct device *d, uint32_t probe_ns, struct zerr *err)
{
	unsigned char *ns = identify_buffer(), *zns = identify_buffer();
	int id, r, rc = -1;
	uint64_t nsze, zsze;
	unsigned flbas, fmt, lbads;

	d->source = "identify";
	if (!ns || !zns) {
		zerr_set(err, EX_INTERNAL, "out of memory");
		goto out;
	}
	d->is_nvme = 0;
	id = zsys_ioctl(d->fd, NVME_IOCTL_ID, NULL);
	if (id > 0) {
		d->kind = DEV_NS_CHAR;
		d->is_nvme = 1;
		d->nsid = (uint32_t)id;
	} else {
		/* no namespace: an NVMe controller answers Identify Controller */
		r = identify(d->fd, CNS_CONTROLLER, 0, 0, ns);
		if (r < 0 && perm_errno(errno)) {
			zerr_set(err, EX_PERMISSION, "%s: permission denied for NVMe Identify: ztbp-ctl needs root",
				 d->path);
			goto out;
		}
		if (r != 0) {
			rc = 0; /* not NVMe */
			goto out;
		}
		d->kind = DEV_CTRL_CHAR;
		d->is_nvme = 1;
		d->nsid = probe_ns ? probe_ns : 1;
	}
	/* zoned: only a zoned namespace answers the ZNS command-set-specific Identify Namespace */
	r = identify(d->fd, CNS_CS_NAMESPACE, CSI_ZNS, d->nsid, zns);
	if (r < 0 && perm_errno(errno)) {
		zerr_set(err, EX_PERMISSION, "%s: permission denied for NVMe Identify: ztbp-ctl needs root", d->path);
		goto out;
	}
	if (r != 0) {
		rc = 0; /* not zoned */
		goto out;
	}
	if (identify(d->fd, CNS_NAMESPACE, 0, d->nsid, ns) != 0) {
		zerr_set(err, EX_GEOMETRY, "%s: NVMe Identify Namespace %u failed", d->path, d->nsid);
		goto out;
	}
	nsze = le64(ns + 0);
	flbas = ns[26];
	fmt = (flbas & 0x0fu) | (((flbas >> 5) & 0x3u) << 4);
	lbads = ns[128 + 4 * fmt + 2];        /* fmt < 64: 64 LBA formats of 4 bytes from byte 128 */
	zsze = le64(zns + 2816 + 16 * fmt);   /* LBA format extensions of 16 bytes from byte 2816 */
	rc = 0;
	if (zsze == 0)
		goto out; /* not zoned after all */
	if (lbads < 9 || lbads > 16 || nsze == 0) {
		zerr_set(err, EX_GEOMETRY, "%s: namespace %u reports an unusable size or LBA size (2^%u)", d->path,
			 d->nsid, lbads);
		rc = -1;
		goto out;
	}
	d->zoned = 1;
	d->lba_bytes = 1u << lbads;
	d->zone_size_lba = zsze;
	d->zone_size_bytes = zsze * d->lba_bytes;
	d->nr_zones = (uint32_t)((nsze + zsze - 1) / zsze);
out:
	free(ns);
	free(zns);
	return rc;
}

int device_probe(struct device *d, uint32_t probe_ns, int want_report, struct zerr *err)
{
	if (!d->is_nvme)
		return 0; /* not NVMe by sysfs: no ioctl at all, not even the block layer's zone ones */
	if (d->kind == DEV_BLOCK)
		return probe_block(d, want_report, err);
	return probe_char(d, probe_ns, err);
}

/* The fields the two admin command structures share (struct nvme_passthru_cmd and its 64-bit twin), from cmd;
 * no data buffer: the ZTBP commands carry none. */
#define FILL_ADMIN(c, cmd)                              \
	do {                                            \
		memset(&(c), 0, sizeof(c));             \
		(c).opcode = (cmd)->opcode;             \
		(c).nsid = (cmd)->nsid;                 \
		(c).cdw10 = (cmd)->cdw[0];              \
		(c).cdw11 = (cmd)->cdw[1];              \
		(c).cdw12 = (cmd)->cdw[2];              \
		(c).cdw13 = (cmd)->cdw[3];              \
		(c).cdw14 = (cmd)->cdw[4];              \
		(c).cdw15 = (cmd)->cdw[5];              \
		(c).timeout_ms = (cmd)->timeout_ms;     \
	} while (0)

/* The admin command through the 64-bit passthrough ioctl, whose result carries completion dwords 0 and 1; a
 * kernel without it (before Linux 5.5) answers ENOTTY without sending anything, and the 32-bit ioctl sends it
 * then (dword 0 only: d->result_dwords says which). */
static int admin_ioctl(struct device *d, const struct ztbp_command *cmd, uint64_t *result)
{
	struct nvme_passthru_cmd64 c64;
	struct nvme_admin_cmd c;
	int r;

	FILL_ADMIN(c64, cmd);
	r = zsys_ioctl(d->fd, NVME_IOCTL_ADMIN64_CMD, &c64);
	if (r >= 0 || errno != ENOTTY) {
		d->result_dwords = 2;
		*result = c64.result;
		return r;
	}
	FILL_ADMIN(c, cmd);
	r = zsys_ioctl(d->fd, NVME_IOCTL_ADMIN_CMD, &c);
	d->result_dwords = 1;
	*result = c.result;
	return r;
}

int device_send(struct device *d, const struct ztbp_command *cmd, uint64_t *result, struct zerr *err)
{
	int r;

	if (!ztbp_sub_valid(cmd->cdw[0])) { /* never reached through ztbp_encode; kept as the last guard */
		zerr_set(err, EX_INTERNAL, "internal error: refusing to send sub-command %u", cmd->cdw[0]);
		return -1;
	}
	if (!d->is_nvme || !opcode_allowed(cmd->opcode)) { /* refused earlier; kept as the last guard */
		zerr_set(err, EX_INTERNAL, "internal error: refusing to send opcode 0x%02x to %s", cmd->opcode,
			 d->path);
		return -1;
	}
	*result = 0;
	r = admin_ioctl(d, cmd, result);
	if (r < 0) {
		int e = errno;
		if (perm_errno(e))
			zerr_set(err, EX_PERMISSION,
				 "%s: permission denied sending the NVMe admin command: ztbp-ctl needs root "
				 "(CAP_SYS_ADMIN)",
				 d->path);
		else if (e == ENOTTY)
			zerr_set(err, EX_NOT_NVME, "%s does not accept NVMe admin commands (%s)", d->path, strerror(e));
		else if (e == ETIMEDOUT)
			zerr_set(err, EX_TIMEOUT,
				 "%s: no completion within %u ms (%s); the controller may have been reset", d->path,
				 cmd->timeout_ms, strerror(e));
		else
			zerr_set(err, EX_IOCTL, "%s: the NVMe admin ioctl failed: %s", d->path, strerror(e));
		return -1;
	}
	if (r > 0) {
		unsigned st = (unsigned)r, sct = (st >> 8) & 0x7, sc = st & 0xff;
		if (sct == 3 && sc == 0x71)
			zerr_set(err, EX_TIMEOUT,
				 "%s: the command was aborted by the host, normally after no completion within %u ms "
				 "(NVMe status 0x%04x: %s); the controller may have been reset",
				 d->path, cmd->timeout_ms, st, nvme_status_name(st));
		else if (sct == 0 && sc == 0x01)
			zerr_set(err, EX_PROTOCOL,
				 "device does not implement the ZTBP cache protocol (NVMe status 0x%04x: %s; opcode "
				 "0x%02x sent to %s)",
				 st, nvme_status_name(st), cmd->opcode, d->path);
		else
			zerr_set(err, EX_DEVICE_STATUS, "%s: the device rejected %s (NVMe status 0x%04x: %s)", d->path,
				 cmd->name, st, nvme_status_name(st));
		return -1;
	}
	return 0;
}
