/* The fuzz target's stand-in for the system calls of the device layer (src/sys.c): a fake device whose
 * every answer (file type, sysfs entry, ioctl results, Identify data, zone reports, completion status) is
 * read in order from a byte stream taken from the fuzz input. No ioctl reaches a real device. */
#ifndef STUB_SYS_H
#define STUB_SYS_H

#include <stddef.h>
#include <stdint.h>

#define STUB_FD 1000 /* the descriptor the fake open returns; no real file has it */

struct stub_state {
	const uint8_t *stream;
	size_t len, pos;
	int sysfs_seen;    /* the sysfs entry was looked up */
	int sysfs_nvme;    /* ... and it named an NVMe device */
	int fd_open;
	unsigned nvme_ioctls;  /* NVME_IOCTL_ID and NVME_IOCTL_ADMIN_CMD calls */
	unsigned vendor_sent;  /* admin commands other than Identify */
};

extern struct stub_state stub;

void stub_reset(const uint8_t *stream, size_t len);

#endif
