#!/bin/bash
# iscsi-lun.sh - export flashd ioDimms as iSCSI LUNs: LIO "user:flashd"
# backstores (served by tcmu-runner + handler_flashd.so) behind one iSCSI
# target, configured with ONE targetcli batch.
#
#   iscsi-lun.sh [options] create CFG [SIZE] [CFG [SIZE] ...]
#   iscsi-lun.sh [options] delete CFG [CFG ...]
#
# CFG is the handler's cfgstring: EXPORT (flashd's default unix socket
# /run/flashd/flashd.sock), EXPORT@/path/to/socket, or EXPORT@host/port for
# TCP (targetcli's rtslib refuses ':' in a cfgstring, so not host:port; an
# IPv6 server needs a host name), optionally followed by ;grace=SECONDS: how
# long the handler holds commands while flashd is unreachable (a restart)
# before failing them (default 20; quote the ';' from the shell).  SIZE is
# the LUN size in targetcli syntax (bytes, or 800M, 1G ...); it must not
# exceed the export's size (the handler refuses to open a larger backstore).
# Without SIZE the export's size is asked from flashd (an NBD handshake, by
# python3, over plain NBD: not for exports that need TLS), rounded down to a
# multiple of 4096 bytes.  LUN n is the n-th CFG.  Backstore names are the
# export names (EXPORT-2, EXPORT-3 ... when an export is given again).
#
# Options:
#   --iqn IQN         target name (default iqn.2024-01.org.flashd:<hostname>)
#   --portal IP:PORT  listen there instead of targetcli's default 0.0.0.0:3260
#   --acl INITIATOR   allow this initiator IQN (repeatable)
#   --open-access     any initiator (labs and tests only); no authentication
#                     unless --chap
#   --chap USER       initiators must log in with CHAP as USER, with the
#                     password in the environment variable CHAP_PASSWORD
#                     (12 to 255 characters, no blanks; not on the command
#                     line, where ps shows it): on each --acl, or on the
#                     portal group with --open-access
#   --save            targetcli saveconfig afterwards (restored at boot by
#                     rtslib-fb-targetctl, which needs tcmu-runner running)
#   --dry-run         print the targetcli batch instead of running it
# One of --acl / --open-access is required for create.
#
# Needs: targetcli (targetcli-fb), a running tcmu-runner that has loaded
# handler_flashd.so (targetcli only lists user:flashd while tcmu-runner owns
# org.kernel.TCMUService1 on the system bus), and flashd reachable at CFG.
# On a failed create everything the batch made is removed again.
set -euo pipefail

PROG=${0##*/}
die() {
	echo "$PROG: $*" >&2
	exit 1
}
usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 2
}

IQN="iqn.2024-01.org.flashd:$(hostname -s 2>/dev/null || echo localhost)"
PORTAL='' OPEN=0 SAVE=0 DRY=0 CHAP_USER=''
ACLS=()
while [ $# -gt 0 ]; do
	case $1 in
	--iqn) IQN=${2:?--iqn needs a value}; shift 2 ;;
	--portal) PORTAL=${2:?--portal needs IP:PORT}; shift 2 ;;
	--acl) ACLS+=("${2:?--acl needs an initiator IQN}"); shift 2 ;;
	--open-access) OPEN=1; shift ;;
	--chap) CHAP_USER=${2:?--chap needs a user name}; shift 2 ;;
	--save) SAVE=1; shift ;;
	--dry-run) DRY=1; shift ;;
	-h | --help) usage ;;
	--) shift; break ;;
	-*) die "unknown option $1 (see --help)" ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || usage
ACTION=$1
shift
[[ $IQN =~ ^(iqn\.[0-9]{4}-[0-9]{2}\.[^[:space:]]+|naa\.[0-9a-fA-F]+|eui\.[0-9a-fA-F]{16})$ ]] ||
	die "bad target name '$IQN' (want iqn.YYYY-MM.reverse.domain:name)"

if [ -n "$CHAP_USER" ]; then
	[[ $CHAP_USER =~ ^[[:graph:]]{1,255}$ ]] || die "bad CHAP user '$CHAP_USER' (no blanks)"
	[[ ${CHAP_PASSWORD:-} =~ ^[[:graph:]]{12,255}$ ]] ||
		die "--chap: set CHAP_PASSWORD in the environment (12 to 255 characters, no blanks)"
fi

CFGS=() SIZES=() NAMES=()
case $ACTION in
create)
	[ $# -ge 1 ] || die "create wants CFG [SIZE] ..."
	while [ $# -gt 0 ]; do
		CFGS+=("$1")
		if [[ ${2:-} =~ ^[0-9]+([kKmMgGtT][bB]?)?$ ]]; then
			SIZES+=("$2")
			shift 2
		else
			SIZES+=("")
			shift
		fi
	done
	[ ${#ACLS[@]} -gt 0 ] || [ $OPEN = 1 ] || die "create: give --acl INITIATOR_IQN (or --open-access for a lab)"
	;;
delete)
	[ $# -ge 1 ] || die "delete wants the CFGs given to create"
	CFGS=("$@")
	;;
*) die "unknown action '$ACTION' (create or delete)" ;;
esac

declare -A USED=()
for i in "${!CFGS[@]}"; do
	c=${CFGS[$i]}
	[[ $c =~ ^[^[:space:]@,\;]+(@[^[:space:],\;]+)?(\;grace=[0-9]+)?$ ]] ||
		die "bad CFG '$c' (want EXPORT, EXPORT@/unix/socket or EXPORT@host/port, then optionally ;grace=SECONDS)"
	[[ $c != *:* ]] || die "CFG '$c': targetcli (rtslib) refuses ':' in a cfgstring; write EXPORT@host/port"
	exp=${c%%[@;]*}
	[[ $exp =~ ^[A-Za-z0-9_.:-]+$ ]] || die "export name '$exp' cannot be a backstore name"
	n=$exp k=1
	while [ -n "${USED[$n]:-}" ]; do k=$((k + 1)); n=$exp-$k; done
	USED[$n]=1
	NAMES+=("$n")
done

# export_size CFG: the export's size in bytes, from an NBD handshake
# (NBD_OPT_INFO) with the server CFG names; python3 is there wherever
# targetcli (a Python program) is
export_size() {
	python3 - "$1" <<'EOF'
import socket, struct, sys
cfg = sys.argv[1].split(";")[0]
export, _, where = cfg.partition("@")
where = where or "/run/flashd/flashd.sock"
try:
    if where.startswith("/"):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(15)
        s.connect(where)
    else:
        host, port = where.rsplit("/", 1) if "/" in where else where.rsplit(":", 1)
        s = socket.create_connection((host.strip("[]"), int(port)), timeout=15)
    f = s.makefile("rwb")
    def get(n):
        b = f.read(n)
        if len(b) != n:
            raise OSError("the server closed the connection")
        return b
    if get(16) != b"NBDMAGICIHAVEOPT":
        raise OSError("not a fixed-newstyle NBD server")
    get(2)
    name = export.encode()
    f.write(struct.pack(">I", 3))  # FIXED_NEWSTYLE | NO_ZEROES
    f.write(b"IHAVEOPT" + struct.pack(">II", 6, 6 + len(name)) + struct.pack(">I", len(name)) + name +
            struct.pack(">H", 0))  # NBD_OPT_INFO
    f.flush()
    size = None
    while True:
        magic, opt, rtype, rlen = struct.unpack(">QIII", get(20))
        data = get(rlen)
        if rtype & 0x80000000:
            raise OSError("the server refused export '%s': %s" %
                          (export, data.decode(errors="replace") or "error %#x" % rtype))
        if rtype == 3 and rlen >= 12 and struct.unpack(">H", data[:2])[0] == 0:  # NBD_INFO_EXPORT
            size = struct.unpack(">Q", data[2:10])[0]
        if rtype == 1:  # NBD_REP_ACK
            break
    f.write(b"IHAVEOPT" + struct.pack(">II", 2, 0))  # NBD_OPT_ABORT
    f.flush()
    if size is None:
        raise OSError("no size in the server's answer")
    print(size)
except (OSError, ValueError) as e:
    sys.exit("%s: %s" % (cfg, e))
EOF
}

CFS=/sys/kernel/config/target
TPG=/iscsi/$IQN/tpg1

batch_create() {
	echo "set global auto_save_on_exit=false"
	for i in "${!CFGS[@]}"; do
		echo "/backstores/user:flashd create name=${NAMES[$i]} size=${SIZES[$i]} cfgstring=${CFGS[$i]}"
	done
	echo "/iscsi create $IQN"
	if [ -n "$PORTAL" ]; then
		echo "$TPG/portals delete 0.0.0.0 3260"
		echo "$TPG/portals create ${PORTAL%:*} ${PORTAL##*:}"
	fi
	for i in "${!CFGS[@]}"; do
		echo "$TPG/luns create /backstores/user:flashd/${NAMES[$i]} lun=$i"
	done
	local auth=0
	if [ -n "$CHAP_USER" ]; then auth=1; fi
	if [ $OPEN = 1 ]; then
		echo "$TPG set attribute authentication=$auth demo_mode_write_protect=0 generate_node_acls=1 cache_dynamic_acls=1"
		if [ -n "$CHAP_USER" ]; then echo "$TPG set auth userid=$CHAP_USER password=$CHAP_PASSWORD"; fi
	elif [ -n "$CHAP_USER" ]; then
		echo "$TPG set attribute authentication=1"
	fi
	for a in "${ACLS[@]}"; do
		echo "$TPG/acls create $a"
		if [ -n "$CHAP_USER" ]; then echo "$TPG/acls/$a set auth userid=$CHAP_USER password=$CHAP_PASSWORD"; fi
	done
	[ $SAVE = 1 ] && echo "saveconfig"
	echo "exit"
}

batch_delete() {
	echo "set global auto_save_on_exit=false"
	echo "/iscsi delete $IQN"
	for n in "${NAMES[@]}"; do
		echo "/backstores/user:flashd delete $n"
	done
	[ $SAVE = 1 ] && echo "saveconfig"
	echo "exit"
}

# the backstore's configfs directory, if it exists (user_<N>/<name>)
backstore_dir() {
	local d
	for d in "$CFS"/core/user_*/"$1"; do
		[ -d "$d" ] && { echo "$d"; return 0; }
	done
	return 1
}

run_targetcli() { # stdin: the batch.  One targetcli process for all of it:
	# each start costs seconds.  Its exit status says nothing about the
	# commands (it carries on after a failed one): callers check configfs.
	targetcli >"$TMP" 2>&1 || true
	# colours off; the last prompt has no newline, so terminate it
	{ cat "$TMP"; echo; } | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^[[:space:]]*$/d' -e 's/^/  targetcli| /'
}

# sizes not given: the export's, rounded down to whole 4 KiB blocks
for i in "${!CFGS[@]}"; do
	[ "$ACTION" = create ] && [ -z "${SIZES[$i]}" ] || continue
	sz=$(export_size "${CFGS[$i]}") || die "no SIZE given for ${CFGS[$i]} and its export's size is unknown"
	SIZES[i]=$((sz / 4096 * 4096))
	[ "${SIZES[$i]}" -gt 0 ] || die "export of ${CFGS[$i]} is smaller than 4096 bytes"
done

if [ $DRY = 1 ]; then
	"batch_$ACTION"
	exit 0
fi
command -v targetcli >/dev/null || die "targetcli not found (apt-get install targetcli-fb)"
[ -d "$CFS" ] || die "$CFS missing: load target_core_mod / mount configfs"
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT

if [ "$ACTION" = delete ]; then
	batch_delete | run_targetcli
	left=
	[ -e "$CFS/iscsi/$IQN" ] && left="$left target $IQN"
	for n in "${NAMES[@]}"; do backstore_dir "$n" >/dev/null && left="$left backstore $n"; done
	[ -z "$left" ] || die "still configured after delete:$left"
	echo "$PROG: deleted $IQN and backstore(s) ${NAMES[*]}"
	exit 0
fi

for n in "${NAMES[@]}"; do
	! backstore_dir "$n" >/dev/null || die "backstore user:flashd/$n exists already (delete it first)"
done
[ ! -e "$CFS/iscsi/$IQN" ] || die "target $IQN exists already (delete it first)"

batch_create | run_targetcli
# targetcli carries on after a failed command, so check what exists
bad=
for i in "${!CFGS[@]}"; do
	d=$(backstore_dir "${NAMES[$i]}") || { bad="$bad; backstore ${NAMES[$i]} (${CFGS[$i]}) was not created"; continue; }
	[ "$(cat "$d/enable" 2>/dev/null)" = 1 ] || bad="$bad; backstore ${NAMES[$i]} is not enabled"
	[ -e "$CFS/iscsi/$IQN/tpgt_1/lun/lun_$i" ] || bad="$bad; LUN $i missing"
done
if [ -n "$bad" ]; then
	echo "$PROG: create failed${bad}; removing what was created" >&2
	echo "$PROG: (see tcmu-runner's log for the handler's reason, e.g. /var/log/tcmu-runner.log)" >&2
	batch_delete | run_targetcli >&2 || true
	exit 1
fi
echo "$PROG: target $IQN: $(for i in "${!CFGS[@]}"; do printf 'LUN %d = %s (%s, %s); ' "$i" "${NAMES[$i]}" "${CFGS[$i]}" "${SIZES[$i]}"; done)"
