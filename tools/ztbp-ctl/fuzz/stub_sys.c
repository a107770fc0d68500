/* See stub_sys.h. Besides answering, the stub aborts when the device layer breaks a rule: an NVMe ioctl
 * (of any kind, the block layer's too) before sysfs said NVMe (or after it said otherwise), an ioctl on a descriptor that is not open, an
 * Identify without a whole page-aligned 4 KiB buffer, a vendor command with a data buffer, a sub-command
 * outside the four, or an opcode that declares a data transfer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include <linux/blkzoned.h>
#include <linux/fs.h>
#include <linux/nvme_ioctl.h>

#include "stub_sys.h"
#include "ztbp_ctl.h"

struct stub_state stub;
static struct stat stub_st;

void stub_reset(const uint8_t *stream, size_t len)
{
	memset(&stub, 0, sizeof stub);
	stub.stream = stream;
	stub.len = len;
}

/* The next n bytes of the stream, little-endian; 0 with *ok = 0 once it is used up. */
static uint64_t take(size_t n, int *ok)
{
	uint64_t v = 0;
	size_t i;

	if (stub.pos + n > stub.len) {
		stub.pos = stub.len;
		*ok = 0;
		return 0;
	}
	for (i = 0; i < n; i++)
		v |= (uint64_t)stub.stream[stub.pos + i] << (8 * i);
	stub.pos += n;
	*ok = 1;
	return v;
}

int zsys_stat(const char *path, struct stat *st)
{
	int ok;
	unsigned b = (unsigned)take(1, &ok);

	(void)path;
	memset(&stub_st, 0, sizeof stub_st);
	stub_st.st_rdev = makedev(259, 0);
	switch (ok ? b % 8 : 0) {
	case 0: errno = ENOENT; return -1;
	case 1: errno = EACCES; return -1;
	case 2: stub_st.st_mode = S_IFREG | 0644; break;
	case 3: stub_st.st_mode = S_IFDIR | 0755; break;
	case 4: case 5: stub_st.st_mode = S_IFBLK | 0600; break;
	default: stub_st.st_mode = S_IFCHR | 0600; break;
	}
	*st = stub_st;
	return 0;
}

int zsys_open(const char *path, int flags)
{
	int ok;
	unsigned b = (unsigned)take(1, &ok);

	(void)path;
	(void)flags;
	if (stub.fd_open)
		abort(); /* opened twice */
	if (ok && b >= 0xf0) {
		errno = b & 1 ? EACCES : ENXIO;
		return -1;
	}
	stub.fd_open = 1;
	return STUB_FD;
}

int zsys_fstat(int fd, struct stat *st)
{
	int ok;
	unsigned b = (unsigned)take(1, &ok);

	if (fd != STUB_FD || !stub.fd_open)
		abort();
	*st = stub_st;
	if (ok && b == 0xff) /* replaced between stat and open */
		st->st_mode = S_IFREG | 0644;
	return 0;
}

char *zsys_realpath(const char *path, char *out)
{
	static const char *const paths[] = {
		"/sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1",
		"/sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1",
		"/sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0/ng0n1",
		"/sys/devices/virtual/mem/null",
		"/sys/devices/virtual/block/nvme-lookalike",
		"/sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda",
	};
	int ok;
	unsigned b = (unsigned)take(1, &ok);

	if (strncmp(path, "/sys/dev/", 9) != 0)
		abort();
	stub.sysfs_seen = 1;
	if (!ok || b % 7 == 6) {
		errno = ENOENT;
		return NULL;
	}
	strcpy(out, paths[b % 7]);
	stub.sysfs_nvme = b % 7 < 3;
	return out;
}

static int fail_errno(unsigned b)
{
	static const int codes[] = {EACCES, EPERM, ENOTTY, ETIMEDOUT, EIO, EINVAL};
	errno = codes[b % (sizeof codes / sizeof codes[0])];
	return -1;
}

static int identify(struct nvme_admin_cmd *c)
{
	unsigned char *buf = (unsigned char *)(uintptr_t)c->addr;
	uint64_t nsze, zsze;
	unsigned flbas, lbads, f;
	int ok;
	unsigned st = (unsigned)take(1, &ok);

	if (!buf || c->addr % 4096 != 0 || c->data_len != 4096)
		abort();
	if (!ok)
		return fail_errno(4);
	if (st >= 0xc0)
		return fail_errno(st);
	if (st != 0 && st < 0x80)
		return (int)st;
	/* success: a namespace page and a ZNS page look alike here; both get every field the probe reads */
	memset(buf, 0, 4096);
	nsze = take(8, &ok);
	flbas = (unsigned)take(1, &ok);
	lbads = (unsigned)take(1, &ok);
	zsze = take(8, &ok);
	for (f = 0; f < 8; f++)
		buf[f] = (unsigned char)(nsze >> (8 * f));
	buf[26] = (unsigned char)flbas;
	for (f = 0; f < 64; f++) {
		unsigned k;
		buf[128 + 4 * f + 2] = (unsigned char)lbads;
		for (k = 0; k < 8; k++)
			buf[2816 + 16 * f + k] = (unsigned char)(zsze >> (8 * k));
	}
	c->result = 0;
	return 0;
}

/* A vendor command; wide: through the 64-bit ioctl, whose result also carries completion dword 1. */
static int vendor(const struct nvme_admin_cmd *c, uint64_t *result, int wide)
{
	int ok;
	unsigned st;

	if (!ztbp_sub_valid(c->cdw10) || !opcode_allowed(c->opcode) || c->opcode <= 0x86 || c->addr ||
	    c->data_len || c->metadata || c->metadata_len)
		abort();
	stub.vendor_sent++;
	st = (unsigned)take(2, &ok);
	if (!ok || st == 0) {
		*result = take(4, &ok);
		if (wide)
			*result |= take(4, &ok) << 32;
		return 0;
	}
	if (st >= 0xf000)
		return fail_errno(st);
	return (int)(st & 0x7ff);
}

static int report_zones(struct blk_zone_report *rep)
{
	struct blk_zone *z = (struct blk_zone *)(void *)(rep + 1);
	uint64_t sector = rep->sector;
	unsigned i, n;
	int ok;

	n = (unsigned)take(1, &ok);
	if (!ok)
		return fail_errno(4);
	if (n > rep->nr_zones)
		n = rep->nr_zones;
	rep->flags = (uint32_t)take(1, &ok) & BLK_ZONE_REP_CAPACITY;
	for (i = 0; i < n; i++) {
		uint64_t len = take(2, &ok);
		memset(&z[i], 0, sizeof z[i]);
		z[i].start = sector;
		z[i].len = len;
		z[i].capacity = take(2, &ok);
		z[i].type = (uint8_t)(take(1, &ok) % 4);
		sector += len;
	}
	rep->nr_zones = n;
	return 0;
}

int zsys_ioctl(int fd, unsigned long request, void *arg)
{
	int ok;
	uint64_t v;

	if (fd != STUB_FD || !stub.fd_open)
		abort();
	if (!stub.sysfs_seen || !stub.sysfs_nvme)
		abort(); /* any ioctl to a device sysfs did not call NVMe */
	if (request == NVME_IOCTL_ID || request == NVME_IOCTL_ADMIN_CMD || request == NVME_IOCTL_ADMIN64_CMD)
		stub.nvme_ioctls++;
	if (request == NVME_IOCTL_ID) {
		v = take(1, &ok);
		return ok && v < 0x80 ? (int)v : fail_errno(2);
	}
	if (request == NVME_IOCTL_ADMIN_CMD) {
		struct nvme_admin_cmd *c = arg;
		uint64_t result = 0;
		int r;

		if (c->opcode == 0x06)
			return identify(c);
		r = vendor(c, &result, 0);
		c->result = (uint32_t)result;
		return r;
	}
	if (request == NVME_IOCTL_ADMIN64_CMD) { /* vendor commands only: Identify goes through the 32-bit one */
		struct nvme_passthru_cmd64 *w = arg;
		struct nvme_admin_cmd c;
		uint64_t result = 0;
		int r;

		if (w->opcode == 0x06)
			abort();
		memset(&c, 0, sizeof c);
		c.opcode = w->opcode;
		c.nsid = w->nsid;
		c.addr = w->addr;
		c.data_len = w->data_len;
		c.metadata = w->metadata;
		c.metadata_len = w->metadata_len;
		c.cdw10 = w->cdw10;
		r = vendor(&c, &result, 1);
		w->result = result;
		return r;
	}
	if (!S_ISBLK(stub_st.st_mode))
		abort(); /* block-layer ioctls go to block devices only */
	if (request == BLKGETZONESZ || request == BLKGETNRZONES) {
		v = take(4, &ok);
		if (!ok)
			return fail_errno(4);
		*(unsigned int *)arg = (unsigned int)v;
		return 0;
	}
	if (request == BLKSSZGET) {
		v = take(2, &ok);
		if (!ok)
			return fail_errno(5);
		*(int *)arg = (int)v;
		return 0;
	}
	if (request == BLKREPORTZONE)
		return report_zones(arg);
	abort(); /* an ioctl the device layer has no business sending */
}

int zsys_close(int fd)
{
	if (fd != STUB_FD || !stub.fd_open)
		abort();
	stub.fd_open = 0;
	return 0;
}

unsigned long long zsys_mono_ns(void)
{
	return 0;
}
