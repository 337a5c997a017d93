/*
 * server/nbd_proto.h - NBD wire constants (doc/proto.md of
 * NetworkBlockDevice/nbd; fixed newstyle, no TLS, no extended headers).
 * Everything on the wire is big-endian.
 */
#ifndef FLASHD_NBD_PROTO_H
#define FLASHD_NBD_PROTO_H

#include <stdint.h>

#define NBD_MAGIC 0x4e42444d41474943ull       /* "NBDMAGIC" */
#define NBD_IHAVEOPT 0x49484156454F5054ull    /* "IHAVEOPT" */
#define NBD_REP_MAGIC 0x0003e889045565a9ull
#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u
#define NBD_STRUCTURED_REPLY_MAGIC 0x668e33efu

/* handshake flags (server) and client flags */
#define NBD_FLAG_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_NO_ZEROES (1u << 1)
#define NBD_FLAG_C_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_C_NO_ZEROES (1u << 1)

/* options */
#define NBD_OPT_EXPORT_NAME 1
#define NBD_OPT_ABORT 2
#define NBD_OPT_LIST 3
#define NBD_OPT_PEEK_EXPORT 4
#define NBD_OPT_STARTTLS 5
#define NBD_OPT_INFO 6
#define NBD_OPT_GO 7
#define NBD_OPT_STRUCTURED_REPLY 8
#define NBD_OPT_LIST_META_CONTEXT 9
#define NBD_OPT_SET_META_CONTEXT 10

/* option replies */
#define NBD_REP_ACK 1u
#define NBD_REP_SERVER 2u
#define NBD_REP_INFO 3u
#define NBD_REP_META_CONTEXT 4u
#define NBD_REP_ERR_UNSUP 0x80000001u
#define NBD_REP_ERR_POLICY 0x80000002u
#define NBD_REP_ERR_INVALID 0x80000003u
#define NBD_REP_ERR_PLATFORM 0x80000004u
#define NBD_REP_ERR_TLS_REQD 0x80000005u
#define NBD_REP_ERR_UNKNOWN 0x80000006u
#define NBD_REP_ERR_SHUTDOWN 0x80000007u
#define NBD_REP_ERR_BLOCK_SIZE_REQD 0x80000008u
#define NBD_REP_ERR_TOO_BIG 0x80000009u

/* NBD_REP_INFO types */
#define NBD_INFO_EXPORT 0
#define NBD_INFO_NAME 1
#define NBD_INFO_DESCRIPTION 2
#define NBD_INFO_BLOCK_SIZE 3

/* transmission flags */
#define NBD_FLAG_HAS_FLAGS (1u << 0)
#define NBD_FLAG_READ_ONLY (1u << 1)
#define NBD_FLAG_SEND_FLUSH (1u << 2)
#define NBD_FLAG_SEND_FUA (1u << 3)
#define NBD_FLAG_ROTATIONAL (1u << 4)
#define NBD_FLAG_SEND_TRIM (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_SEND_DF (1u << 7)
#define NBD_FLAG_CAN_MULTI_CONN (1u << 8)
#define NBD_FLAG_SEND_CACHE (1u << 10)
#define NBD_FLAG_SEND_FAST_ZERO (1u << 11)

/* commands and their flags */
#define NBD_CMD_READ 0
#define NBD_CMD_WRITE 1
#define NBD_CMD_DISC 2
#define NBD_CMD_FLUSH 3
#define NBD_CMD_TRIM 4
#define NBD_CMD_CACHE 5
#define NBD_CMD_WRITE_ZEROES 6
#define NBD_CMD_BLOCK_STATUS 7

#define NBD_CMD_FLAG_FUA (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE (1u << 1)
#define NBD_CMD_FLAG_DF (1u << 2)
#define NBD_CMD_FLAG_REQ_ONE (1u << 3)
#define NBD_CMD_FLAG_FAST_ZERO (1u << 4)

/* structured replies */
#define NBD_REPLY_FLAG_DONE (1u << 0)
#define NBD_REPLY_TYPE_NONE 0
#define NBD_REPLY_TYPE_OFFSET_DATA 1
#define NBD_REPLY_TYPE_OFFSET_HOLE 2
#define NBD_REPLY_TYPE_BLOCK_STATUS 5
#define NBD_REPLY_TYPE_ERROR 0x8001
#define NBD_REPLY_TYPE_ERROR_OFFSET 0x8002

/* base:allocation */
#define NBD_STATE_HOLE (1u << 0)
#define NBD_STATE_ZERO (1u << 1)

/* errors on the wire */
#define NBD_EPERM 1
#define NBD_EIO 5
#define NBD_ENOMEM 12
#define NBD_EINVAL 22
#define NBD_ENOSPC 28
#define NBD_EOVERFLOW 75
#define NBD_ENOTSUP 95
#define NBD_ESHUTDOWN 108

#define NBD_REQUEST_SIZE 28
#define NBD_SIMPLE_REPLY_SIZE 16
#define NBD_CHUNK_HDR_SIZE 20

#endif
