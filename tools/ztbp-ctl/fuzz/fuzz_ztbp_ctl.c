/* libFuzzer target over the cache-config parser, the command line and the whole program with a stubbed
 * device layer.
 *
 * Input: the first byte picks the mode, the rest is the payload.
 *   even first byte (e.g. '0'): payload = a cache-config.json; parse it, pick zones (--top5), encode
 *                               the SET command and render it as JSON;
 *   first byte % 4 == 1 (e.g. '1'): payload = command-line arguments separated by NUL bytes (after
 *                               "ztbp-ctl"); parse them and, for set/info/status/stop, pick zones,
 *                               encode and render the dry-run JSON;
 *   first byte % 4 == 3 (e.g. '3'): main.c and device.c end to end: payload = one byte N, N bytes of
 *                               device answers (stub_sys.c), two bytes M (little-endian), M bytes of a
 *                               cache-config.json, then NUL-separated arguments where "@cfg" stands for
 *                               that config file and "@dev" for the fake device.
 * Besides the sanitizers, it checks invariants and aborts when one breaks: only the four ZTBP
 * sub-commands are ever encoded or sent, SET dwords name only selected zones, the rendered JSON parses with
 * the strict parser, every error carries a known exit code and a message, no NVMe ioctl reaches a device
 * that sysfs does not call NVMe, no command carries a data buffer, and the device is closed at exit.
 * No real device is touched: device.c's system calls go to stub_sys.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stub_sys.h"
#include "ztbp_ctl.h"

#define MAX_ARGS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(const struct zerr *e)
{
	size_t i;

	if (e->msg[0] == '\0')
		abort();
	for (i = 0; i < ztbp_exit_codes_n; i++)
		if (ztbp_exit_codes[i].code == e->code && e->code != EX_OK)
			return;
	abort();
}

static void check_command(const struct options *o, const uint32_t *zones, size_t n)
{
	struct ztbp_command cmd;
	struct zerr e = {0, ""};
	struct sbuf b = {0};
	struct jdoc d;
	char jerr[200];
	size_t i, k;

	if (ztbp_encode(o, zones, n, &cmd, &e)) {
		check_error(&e);
		return;
	}
	if (!ztbp_sub_valid(cmd.cdw[0]))
		abort();
	if (o->cmd == CMD_SET) {
		for (i = 1; i < 6; i++) {
			int found = 0;
			for (k = 0; k < n; k++)
				found |= cmd.cdw[i] == zones[k];
			if (!found)
				abort();
		}
	} else {
		for (i = 1; i < 6; i++)
			if (cmd.cdw[i] != 0)
				abort();
	}
	sb_printf(&b, "{");
	command_json(&b, &cmd, o->dev, 1);
	sb_printf(&b, "}");
	if (b.oom)
		abort();
	if (json_parse(b.p, b.len, &d, jerr, sizeof jerr))
		abort();
	json_free(&d);
	sb_free(&b);
}

static void fuzz_config(const uint8_t *p, size_t n)
{
	struct cache_config cfg;
	struct zerr e = {0, ""};
	struct options o;
	uint32_t zones[ZTBP_MAX_ZONES];
	size_t nz;

	if (config_parse((const char *)p, n, &cfg, &e)) {
		check_error(&e);
		return;
	}
	memset(&o, 0, sizeof o);
	o.cmd = CMD_SET;
	o.config = "fuzz";
	o.top5 = (n & 1) != 0;
	o.opcode = ZTBP_DEFAULT_OPCODE;
	o.timeout_ms = ZTBP_DEFAULT_TIMEOUT_MS;
	if (select_zones(&o, &cfg, cfg.nr_zones, "config's", zones, &nz, &e))
		check_error(&e);
	else
		check_command(&o, zones, nz);
	config_free(&cfg);
}

static void fuzz_args(const uint8_t *p, size_t n)
{
	char *buf = malloc(n + 1);
	char *argv[MAX_ARGS + 2];
	int argc = 1;
	size_t i, start = 0;
	struct options o;
	struct zerr e = {0, ""};

	if (!buf)
		return;
	memcpy(buf, p, n);
	buf[n] = '\0';
	argv[0] = (char *)"ztbp-ctl";
	for (i = 0; i <= n && argc <= MAX_ARGS; i++) {
		if (i == n || buf[i] == '\0') {
			buf[i] = '\0';
			argv[argc++] = buf + start;
			start = i + 1;
		}
	}
	argv[argc] = NULL;
	if (cli_parse(argc, argv, &o, &e)) {
		check_error(&e);
	} else if (o.cmd == CMD_HELP) {
		struct sbuf b = {0};
		usage_text(&b);
		sb_free(&b);
	} else if (o.cmd >= CMD_SET && !o.config) {
		uint32_t zones[ZTBP_MAX_ZONES];
		size_t nz = 0;
		/* a device zone count taken from the input, to reach the range check */
		int64_t nr = n ? (int64_t)p[0] * 4 : -1;
		if (o.cmd == CMD_SET && select_zones(&o, NULL, nr, "device's", zones, &nz, &e))
			check_error(&e);
		else
			check_command(&o, zones, nz);
	}
	free(buf);
}

static int known_exit(int code)
{
	size_t i;

	for (i = 0; i < ztbp_exit_codes_n; i++)
		if (ztbp_exit_codes[i].code == code)
			return 1;
	return 0;
}

/* The config file of main mode: one temporary file, rewritten for every input. */
static const char *config_file(const uint8_t *p, size_t n)
{
	static char path[] = "/tmp/ztbp-ctl-fuzz-XXXXXX";
	static int fd = -1;

	if (fd < 0) {
		fd = mkstemp(path);
		if (fd < 0)
			abort();
	}
	if (ftruncate(fd, 0) || (n && pwrite(fd, p, n, 0) != (ssize_t)n))
		abort();
	return path;
}

static void fuzz_main(const uint8_t *p, size_t n)
{
	size_t ns, nc, i, start;
	const char *cfg;
	char *buf, *argv[MAX_ARGS + 2];
	int argc = 1, rc;

	if (n < 1 || (ns = p[0]) > n - 1)
		return;
	stub_reset(p + 1, ns);
	p += 1 + ns;
	n -= 1 + ns;
	if (n < 2 || (nc = (size_t)p[0] | (size_t)p[1] << 8) > n - 2)
		return;
	cfg = config_file(p + 2, nc);
	p += 2 + nc;
	n -= 2 + nc;
	buf = malloc(n + 1);
	if (!buf)
		return;
	memcpy(buf, p, n);
	buf[n] = '\0';
	argv[0] = (char *)"ztbp-ctl";
	for (i = 0, start = 0; i <= n && argc <= MAX_ARGS; i++) {
		if (i == n || buf[i] == '\0') {
			char *a = buf + start;
			buf[i] = '\0';
			argv[argc++] = strcmp(a, "@cfg") == 0 ? (char *)(uintptr_t)cfg
				       : strcmp(a, "@dev") == 0 ? (char *)"/dev/fuzz0n1" : a;
			start = i + 1;
		}
	}
	argv[argc] = NULL;
	rc = ztbp_main(argc, argv);
	if (!known_exit(rc) || stub.fd_open)
		abort();
	if (stub.vendor_sent && !stub.sysfs_nvme) /* also checked on every ioctl */
		abort();
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] % 2 == 0)
		fuzz_config(data + 1, size - 1);
	else if (data[0] % 4 == 1)
		fuzz_args(data + 1, size - 1);
	else
		fuzz_main(data + 1, size - 1);
	return 0;
}
