/* The system calls of the device layer (see ztbp_ctl.h); the fuzz target replaces this file with a stub. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "ztbp_ctl.h"

int zsys_stat(const char *path, struct stat *st)
{
	return stat(path, st);
}

int zsys_open(const char *path, int flags)
{
	return open(path, flags);
}

int zsys_fstat(int fd, struct stat *st)
{
	return fstat(fd, st);
}

int zsys_ioctl(int fd, unsigned long request, void *arg)
{
	return ioctl(fd, request, arg);
}

int zsys_close(int fd)
{
	return close(fd);
}

char *zsys_realpath(const char *path, char *out)
{
	return realpath(path, out);
}

unsigned long long zsys_mono_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;
	return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}
