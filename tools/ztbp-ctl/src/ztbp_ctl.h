/* ztbp-ctl: send the ZTBP hot-zone cache configuration to a zoned NVMe device.
 *
 * Shared declarations of the pure parts (exit codes, strict JSON, cache-config, command line, command
 * encoding) and of the device layer. Everything except device.c, sys.c and main.c does no I/O, so the fuzz
 * target and the tests can drive it directly.
 */
#ifndef ZTBP_CTL_H
#define ZTBP_CTL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define ZTBP_CTL_VERSION "0.1.0"

/* ---- exit codes: every failure has its own ------------------------------------------------------ */
enum ztbp_exit {
	EX_OK = 0,
	EX_INTERNAL = 1,          /* out of memory or a bug: never expected */
	EX_USAGE = 2,             /* bad command line */
	EX_ZONES_SYNTAX = 3,      /* --zones is not a comma-separated list of decimal zone ids */
	EX_TOO_MANY_ZONES = 4,    /* more than five zones for one SET (without --top5) */
	EX_ZONE_RANGE = 5,        /* a zone id >= the zone count of the device or of the config */
	EX_ZONE_DUP = 6,          /* a zone id listed twice */
	EX_NO_ZONES = 7,          /* the config lists no hot zones */
	EX_OPCODE_REFUSED = 8,    /* --opcode names a standard admin opcode or one that declares a data transfer */
	EX_CONFIG_READ = 10,      /* config file missing, unreadable or not a regular file */
	EX_CONFIG_SIZE = 11,      /* config file larger than the limit */
	EX_CONFIG_JSON = 12,      /* config file is not valid JSON */
	EX_CONFIG_FORMAT = 13,    /* "format" missing or not "ztbp-cache-config/1" */
	EX_CONFIG_SCHEMA = 14,    /* a key has the wrong type or value, zone_scores disagrees with hot_zones */
	EX_GEOMETRY_MISMATCH = 15,/* the config's geometry is not the device's */
	EX_NOT_RECOMMENDED = 16,  /* the config says "recommend": false */
	EX_DEV_OPEN = 20,         /* device missing or cannot be opened */
	EX_PERMISSION = 21,       /* permission denied: needs root */
	EX_NOT_DEVICE = 22,       /* path is not a block or character device */
	EX_NOT_NVME = 23,         /* device is not NVMe */
	EX_NOT_ZONED = 24,        /* device is not zoned */
	EX_GEOMETRY = 25,         /* reading the zone geometry failed */
	EX_PROTOCOL = 30,         /* device does not implement the ZTBP cache protocol (Invalid Command Opcode) */
	EX_DEVICE_STATUS = 31,    /* device completed the command with another NVMe error status */
	EX_TIMEOUT = 32,          /* no completion within the timeout (the controller may have been reset) */
	EX_IOCTL = 33,            /* the ioctl failed with an operating-system error */
};

struct exit_code_doc {
	int code;
	const char *name;
	const char *meaning;
};
extern const struct exit_code_doc ztbp_exit_codes[];
extern const size_t ztbp_exit_codes_n;

/* An error: exit code plus one message line (no trailing newline). */
struct zerr {
	int code;
	char msg[512];
};
void zerr_set(struct zerr *e, int code, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

/* ---- growable string buffer (all output is built here, then written) ------------------------------ */
struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};
void sb_printf(struct sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 2, 3)))
#endif
	;
void sb_json_string(struct sbuf *b, const char *s); /* quoted, escaped; NULL -> null */
/* Length of the well-formed UTF-8 sequence at s (at most avail bytes), 0 when it is not one. */
size_t utf8_valid_len(const unsigned char *s, size_t avail);
void sb_free(struct sbuf *b);

/* ---- strict JSON (RFC 8259) ------------------------------------------------------------------------ */
enum jtype { J_NULL, J_FALSE, J_TRUE, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT };

struct jnode {
	enum jtype type;
	const char *key;     /* member name inside an object (decoded, NUL-terminated), else NULL */
	size_t key_len;
	const char *str;     /* J_STRING: decoded, NUL-terminated (may contain \u0000: use str_len) */
	size_t str_len;
	int is_int;          /* J_NUMBER written without fraction or exponent and fits int64 */
	int64_t ival;
	double dval;
	size_t first_child;  /* J_ARRAY / J_OBJECT: index of the first child, 0 when empty */
	size_t n_children;
	size_t next;         /* next sibling, 0 when last */
	size_t key_off, str_off; /* offsets into jdoc.strings (used while parsing, when it can move) */
	int has_key;
};

struct jdoc {
	struct jnode *nodes; /* nodes[0] is the root value */
	size_t n_nodes, cap_nodes;
	char *strings;       /* decoded strings */
	size_t str_used, str_cap;
};

#define JSON_MAX_DEPTH 64
/* Parse text[0..len) strictly. Returns 0, or -1 with a "line L, column C: ..." message in err. */
int json_parse(const char *text, size_t len, struct jdoc *doc, char *err, size_t errlen);
void json_free(struct jdoc *doc);
const struct jnode *json_get(const struct jdoc *doc, const struct jnode *obj, const char *key);

/* ---- cache-config.json ("ztbp-cache-config/1") ---------------------------------------------------- */
#define CONFIG_FORMAT "ztbp-cache-config/1"
#define CONFIG_MAX_BYTES (64 * 1024)

struct zone_score {
	uint32_t zone;
	uint64_t reads;
	double share;
};

struct cache_config {
	uint32_t *hot_zones;        /* highest score first */
	size_t n_hot;
	struct zone_score *scores;  /* same order as hot_zones; NULL when the key is absent */
	size_t n_scores;
	int64_t nr_zones;           /* -1 when absent */
	int64_t zone_size_lba;      /* -1 when absent */
	int64_t lba_bytes;          /* -1 when absent */
	int recommend;              /* "recommend": 1 true, 0 false, -1 absent (configs written before the key) */
	char recommend_reason[256]; /* "recommend_reason", cut to fit; empty when absent */
};

/* Parse a config from memory (size limit, JSON, format line, schema). 0 or -1 with err set. */
int config_parse(const char *text, size_t len, struct cache_config *cfg, struct zerr *err);
/* Read FILE (regular file, at most CONFIG_MAX_BYTES) and parse it. */
int config_load(const char *path, struct cache_config *cfg, struct zerr *err);
void config_free(struct cache_config *cfg);

/* ---- the command line ------------------------------------------------------------------------------ */
enum ztbp_cmd { CMD_NONE, CMD_HELP, CMD_VERSION, CMD_GEOMETRY, CMD_SET, CMD_INFO, CMD_STATUS, CMD_STOP };

#define ZTBP_MAX_ZONES 5

struct options {
	enum ztbp_cmd cmd;
	const char *dev;         /* NULL only with --dry-run */
	const char *config;      /* set --config */
	int have_zones;          /* set --zones given */
	uint32_t zones[ZTBP_MAX_ZONES];
	size_t n_zones;          /* ids given in --zones (only the first five are stored) */
	int top5, json, dry_run, force;
	uint8_t opcode;
	int have_nsid;
	uint32_t nsid;
	uint32_t timeout_ms;
};

#define ZTBP_DEFAULT_OPCODE 0x99
#define ZTBP_DEFAULT_TIMEOUT_MS 10000u
#define ZTBP_MAX_TIMEOUT_MS 600000u

int cli_parse(int argc, char *const argv[], struct options *o, struct zerr *err);
/* Parse "1,7,11": strict decimal ids < 2^32, no blanks or empty items; stores at most five. */
int parse_zone_list(const char *s, uint32_t out[ZTBP_MAX_ZONES], size_t *n_total, struct zerr *err);
void usage_text(struct sbuf *b);

/* ---- the ZTBP vendor admin command ----------------------------------------------------------------- */
/* The only sub-commands ever sent (cdw10). NVMeVirt's ZTBP build never completes any other value and
 * resets the controller after about a minute, so nothing else may reach the device. */
enum ztbp_sub { ZSUB_SET = 99, ZSUB_INFO = 98, ZSUB_STATUS = 97, ZSUB_STOP = 96 };

struct ztbp_command {
	const char *name;        /* "set", "info", "status", "stop" */
	uint8_t opcode;
	uint32_t nsid;
	uint32_t cdw[6];         /* cdw10 .. cdw15 */
	uint32_t timeout_ms;
	uint32_t zones[ZTBP_MAX_ZONES];
	size_t n_zones;
};

int ztbp_sub_valid(uint32_t cdw10);
/* Fill cmd for o->cmd with the zones given (SET: 1..5 distinct ids; unused dwords repeat the last id so
 * the device never sees a zone that was not asked for). */
int ztbp_encode(const struct options *o, const uint32_t *zones, size_t n, struct ztbp_command *cmd,
		struct zerr *err);
/* Choose the zones to send for `set`: from --zones or from the config (with --top5), checked for count,
 * duplicates and range (nr_zones < 0: unknown). */
int select_zones(const struct options *o, const struct cache_config *cfg, int64_t nr_zones,
		 const char *nr_zones_source, uint32_t out[ZTBP_MAX_ZONES], size_t *n, struct zerr *err);
/* Whether --opcode may be sent: 0x99 (the protocol's own) or a vendor opcode 0x87..0xff whose data-transfer
 * bits (opcode & 3) are 00, since the command never carries a data buffer. */
int opcode_allowed(uint8_t opcode);
/* Whether the config's geometry, where it gives one, is the device's: nr_zones, and zone_size_lba * lba_bytes
 * (a product beyond 64 bits is no device's zone size). */
int config_geometry_matches(const struct cache_config *cfg, uint32_t nr_zones, uint64_t zone_size_bytes);
void command_json(struct sbuf *b, const struct ztbp_command *cmd, const char *dev, int dry_run);
const char *nvme_status_name(unsigned status);

/* ---- the device (Linux ioctls) --------------------------------------------------------------------- */
enum dev_kind { DEV_BLOCK, DEV_NS_CHAR, DEV_CTRL_CHAR, DEV_OTHER };

struct device {
	int fd;
	const char *path;
	enum dev_kind kind;
	int is_nvme;
	uint32_t nsid;           /* namespace of the device (block / generic) or the one probed (controller) */
	int zoned;
	uint32_t nr_zones;
	uint32_t lba_bytes;
	uint64_t zone_size_lba;
	uint64_t zone_size_bytes;
	/* from BLKREPORTZONE (block devices only) */
	int have_report;
	uint64_t zone_cap_min_sectors, zone_cap_max_sectors;
	uint32_t conventional_zones;
	int capacity_reported;
	const char *source;      /* "blkzoned" or "identify" */
	int result_dwords;       /* completion dwords the last command answered: 2 (64-bit ioctl) or 1 (32-bit) */
};

/* Open path: a block or character device, and whether it is NVMe by its sysfs entry alone (is_nvme), so that
 * nothing is sent to a device of another driver, whose ioctl numbers may mean something else. */
int device_open(const char *path, struct device *d, struct zerr *err);
/* Whether the resolved sysfs path of a device (/sys/dev/{block,char}/MAJ:MIN) lies under an NVMe controller
 * or subsystem: a path component "nvme" or "nvme-subsystem". */
int sysfs_path_is_nvme(const char *real);
/* Find out whether d is zoned, and its zone geometry (probe_ns: namespace for a controller); a device that is not
 * NVMe by its sysfs entry is left as it is, with no ioctl sent. */
int device_probe(struct device *d, uint32_t probe_ns, int want_report, struct zerr *err);
/* Send cmd; on success result holds completion dword 0 in its low half and, where d->result_dwords is 2, dword 1
 * in its high half (the 64-bit admin ioctl; the 32-bit one where the kernel lacks it). */
int device_send(struct device *d, const struct ztbp_command *cmd, uint64_t *result, struct zerr *err);
void device_close(struct device *d);

/* ---- the system calls of the device layer: sys.c makes them; the fuzz target links a stub instead ------ */
int zsys_stat(const char *path, struct stat *st);
int zsys_open(const char *path, int flags);
int zsys_fstat(int fd, struct stat *st);
int zsys_ioctl(int fd, unsigned long request, void *arg);
int zsys_close(int fd);
/* realpath(3) into out (PATH_MAX bytes); NULL with errno on failure. */
char *zsys_realpath(const char *path, char *out);
/* CLOCK_MONOTONIC in ns (the clock of the kernel's trace timestamps), 0 if it cannot be read. */
unsigned long long zsys_mono_ns(void);

#ifdef ZTBP_FUZZ
int ztbp_main(int argc, char *argv[]); /* main.c's main, renamed for the fuzz target */
#endif

#endif
