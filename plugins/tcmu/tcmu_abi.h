/*
 * plugins/tcmu/tcmu_abi.h - the tcmu-runner 1.5.4 ABI the flashd handler
 * is built against (tcmu-runner.h / libtcmu_common.h / libtcmu_log.h),
 * included by the handler's files (plugins/tcmu/) alone.
 *
 * ABI.  Debian ships no tcmu-runner headers, so the 1.5.4 ABI (Debian
 * bookworm 1.5.4-4.1) is declared here; the _Static_asserts pin the layout.
 * tcmur_* symbols come from the tcmu-runner executable, tcmu_* from
 * libtcmu.so.2; both resolve when tcmu-runner dlopen()s us.
 */
#ifndef FLASHD_TCMU_ABI_H
#define FLASHD_TCMU_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct tcmu_device;
struct tcmulib_cfg_info;

enum { /* libtcmu_common.h, in this order */
	TCMU_STS_ASYNC_HANDLED = -2,
	TCMU_STS_NOT_HANDLED = -1,
	TCMU_STS_OK = 0,
	TCMU_STS_NO_RESOURCE,		/* TASK SET FULL */
	TCMU_STS_PASSTHROUGH_ERR,	/* handler has set up the sense */
	TCMU_STS_BUSY,
	TCMU_STS_WR_ERR,		/* MEDIUM ERROR, WRITE ERROR 0C/00 */
	TCMU_STS_RD_ERR,		/* MEDIUM ERROR, UNRECOVERED READ 11/00 */
	TCMU_STS_MISCOMPARE,
	TCMU_STS_INVALID_CMD,
	TCMU_STS_INVALID_CDB,
	TCMU_STS_INVALID_PARAM_LIST,
	TCMU_STS_INVALID_PARAM_LIST_LEN,
	TCMU_STS_TIMEOUT,
	TCMU_STS_FENCED,
	TCMU_STS_HW_ERR,		/* HARDWARE ERROR, INTERNAL TARGET FAILURE 44/00 */
	TCMU_STS_RANGE,			/* ILLEGAL REQUEST, LBA OUT OF RANGE 21/00 */
	TCMU_STS_FRMT_IN_PROGRESS,
	TCMU_STS_CAPACITY_CHANGED,
	TCMU_STS_NOTSUPP_SAVE_PARAMS,
	TCMU_STS_WR_ERR_INCOMPAT_FRMT,	/* ILLEGAL REQUEST 30/05: not write protect */
};

#define SENSE_BUFFERSIZE 96
#define SENSE_DATA_PROTECT 0x07
#define ASC_WRITE_PROTECTED 0x2700

/* struct tcmulib_cmd (libtcmu_common.h); we read cdb and write sense_buf */
struct tcmulib_cmd {
	uint16_t cmd_id;
	uint8_t *cdb;
	struct iovec *iovec;
	size_t iov_cnt;
	uint8_t sense_buf[SENSE_BUFFERSIZE];
	void *hm_private;
};
_Static_assert(offsetof(struct tcmulib_cmd, cdb) == 8, "tcmulib_cmd.cdb");
_Static_assert(offsetof(struct tcmulib_cmd, sense_buf) == 32, "tcmulib_cmd.sense_buf");
_Static_assert(sizeof(struct tcmulib_cmd) == 136, "tcmulib_cmd size");

/*
 * struct tcmur_cmd (tcmu-runner.h, sizeof 96); only its first member is
 * used.  Commands the runner builds itself (split UNMAPs, write-same
 * emulation, xcopy) may carry lib_cmd == NULL.
 */
struct tcmur_cmd {
	struct tcmulib_cmd *lib_cmd;
};

struct tcmur_handler {
	const char *name;
	const char *subtype;
	const char *cfg_desc;
	void *opaque;
	bool (*check_config)(const char *cfgstring, char **reason);
	int (*reconfig)(struct tcmu_device *dev, struct tcmulib_cfg_info *cfg);
	int (*open)(struct tcmu_device *dev, bool reopen);
	void (*close)(struct tcmu_device *dev);
	int nr_threads;
	int (*handle_cmd)(struct tcmu_device *dev, struct tcmur_cmd *cmd);
	int (*read)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
		    struct iovec *iovec, size_t iov_cnt, size_t len, off_t off);
	int (*write)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
		     struct iovec *iovec, size_t iov_cnt, size_t len, off_t off);
	int (*flush)(struct tcmu_device *dev, struct tcmur_cmd *cmd);
	int (*unmap)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
		     uint64_t off, uint64_t len);
	int (*writesame)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
			 uint64_t off, uint64_t len, struct iovec *iovec, size_t iov_cnt);
	int (*caw)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
		   uint64_t off, uint64_t len, struct iovec *iovec, size_t iov_cnt);
	int (*report_event)(struct tcmu_device *dev);
	int (*lock)(struct tcmu_device *dev, uint16_t tag);
	int (*unlock)(struct tcmu_device *dev);
	int (*get_lock_tag)(struct tcmu_device *dev, uint16_t *tag);
	int (*get_lock_state)(struct tcmu_device *dev);
	bool _is_dbus_handler;
	bool (*update_logdir)(void);
	int (*init)(void);
	void (*destroy)(void);
};
_Static_assert(sizeof(struct tcmur_handler) == 200, "tcmur_handler size (1.5.4)");
_Static_assert(offsetof(struct tcmur_handler, open) == 48, "open");
_Static_assert(offsetof(struct tcmur_handler, nr_threads) == 64, "nr_threads");
_Static_assert(offsetof(struct tcmur_handler, handle_cmd) == 72, "handle_cmd");
_Static_assert(offsetof(struct tcmur_handler, read) == 80, "read");
_Static_assert(offsetof(struct tcmur_handler, flush) == 96, "flush");
_Static_assert(offsetof(struct tcmur_handler, unmap) == 104, "unmap");
_Static_assert(offsetof(struct tcmur_handler, writesame) == 112, "writesame");
_Static_assert(offsetof(struct tcmur_handler, caw) == 120, "caw");
_Static_assert(offsetof(struct tcmur_handler, get_lock_state) == 160, "get_lock_state");
_Static_assert(offsetof(struct tcmur_handler, _is_dbus_handler) == 168, "_is_dbus_handler");
_Static_assert(offsetof(struct tcmur_handler, update_logdir) == 176, "update_logdir");
_Static_assert(offsetof(struct tcmur_handler, destroy) == 192, "destroy");

/* exported by the tcmu-runner executable */
int tcmur_register_handler(struct tcmur_handler *handler);
void tcmur_cmd_complete(struct tcmu_device *dev, void *data, int rc);
void tcmur_dev_set_private(struct tcmu_device *dev, void *private);
void *tcmur_dev_get_private(struct tcmu_device *dev);
/* exported by libtcmu.so.2 */
char *tcmu_dev_get_cfgstring(struct tcmu_device *dev);
uint64_t tcmu_dev_get_num_lbas(struct tcmu_device *dev);
uint32_t tcmu_dev_get_block_size(struct tcmu_device *dev);
void tcmu_dev_set_write_cache_enabled(struct tcmu_device *dev, bool enabled);
void tcmu_dev_set_solid_state_media(struct tcmu_device *dev, bool solid_state);
void tcmu_dev_set_max_unmap_len(struct tcmu_device *dev, uint32_t len);
void tcmu_dev_set_opt_unmap_gran(struct tcmu_device *dev, uint32_t len, bool split);
void tcmu_dev_set_unmap_gran_align(struct tcmu_device *dev, uint32_t len);
int tcmu_sense_set_data(uint8_t *sense_buf, uint8_t key, uint16_t asc_ascq);
void tcmu_err_message(struct tcmu_device *dev, const char *funcname, int linenr,
		      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void tcmu_warn_message(struct tcmu_device *dev, const char *funcname, int linenr,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void tcmu_info_message(struct tcmu_device *dev, const char *funcname, int linenr,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void tcmu_dbg_message(struct tcmu_device *dev, const char *funcname, int linenr,
		      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define fl_err(dev, ...) tcmu_err_message(dev, __func__, __LINE__, __VA_ARGS__)
#define fl_warn(dev, ...) tcmu_warn_message(dev, __func__, __LINE__, __VA_ARGS__)
#define fl_info(dev, ...) tcmu_info_message(dev, __func__, __LINE__, __VA_ARGS__)
#define fl_dbg(dev, ...) tcmu_dbg_message(dev, __func__, __LINE__, __VA_ARGS__)

#endif
