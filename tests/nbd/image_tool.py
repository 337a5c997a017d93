"""image_tool.py - damage a simulated ioDimm image the way a disk, a
careless admin or bit rot would, for the image-damage tests.

The image layout (hw/nand_sim_int.h): a 4 KiB header (u32 version at offset
8, geometry at 16, data_off at 104, slot_size at 112, the CRC-32 of the
bytes before it at 184), the block table at 4096 (16 bytes per
block: u16 write pointer, u16 torn page, u8 flags, 3 pad, u32 erase count,
u32 crc), then one slot per page: page_size data bytes, then the spare.
The FTL's spare (ftl/media.h): u32 magic "SFTL", u8 type (1 data, 2 trim,
3 checkpoint, 4 superblock), u8 version, u16 flags, u32 lba, u32 data crc,
u64 seq, u64 format id, u32 reserved, u32 crc.

    python3 image_tool.py IMAGE superblock-pages           # how many programmed
    python3 image_tool.py IMAGE damage-superblocks         # every sb page's magic
    python3 image_tool.py IMAGE set-wp BLOCK VALUE         # 2 bytes of the table
    python3 image_tool.py IMAGE set-version 1              # as an older flashd wrote it
    python3 image_tool.py IMAGE set-newest-seq SEQ         # of the newest data page
    python3 image_tool.py IMAGE flip-units U [U ...]       # newest page of each unit
    python3 image_tool.py IMAGE damage-checkpoint-page     # one map page's data
    python3 image_tool.py IMAGE damage-checkpoint          # page 0 of every map and parity block
    python3 image_tool.py IMAGE sha256                     # of the whole file
"""
import hashlib
import mmap
import struct
import sys
import zlib

SPARE_MAGIC = 0x4C544653
PG_DATA, PG_TRIM, PG_CKPT, PG_SB = 1, 2, 3, 4


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def parse_spare(buf, off=0):
    """the FTL's spare at OFF of BUF: {type, lba, seq, format}, or None
    where its magic is not "SFTL" (an erased or foreign page)"""
    magic, typ, _ver, _fl, lba, _dcrc, seq, fmt = struct.unpack_from("<IBBHIIQQ", buf, off)
    if magic != SPARE_MAGIC:
        return None
    return {"type": typ, "lba": lba, "seq": seq, "format": fmt}


class Image:
    def __init__(self, path):
        self.f = open(path, "r+b")
        self.m = mmap.mmap(self.f.fileno(), 0)
        (self.channels, self.dies_per_channel, self.planes, self.blocks_per_die,
         self.ppb, self.page_size, self.spare_size) = struct.unpack_from("<7I", self.m, 16)
        self.data_off, self.slot = struct.unpack_from("<QQ", self.m, 104)
        self.nblocks = self.channels * self.dies_per_channel * self.blocks_per_die

    def wp(self, block):
        return struct.unpack_from("<H", self.m, 4096 + 16 * block)[0]

    def slot_off(self, ppa):
        return self.data_off + ppa * self.slot

    def spare(self, ppa):
        return parse_spare(self.m, self.slot_off(ppa) + self.page_size)

    def programmed(self, block):
        """pages of block below its write pointer"""
        base = block * self.ppb
        return [base + p for p in range(min(self.wp(block), self.ppb))]

    def flip(self, off, n):
        for i in range(n):
            self.m[off + i] ^= 0xFF

    def sb_blocks(self):
        return [0, self.blocks_per_die]

    def close(self):
        self.m.flush()
        self.m.close()
        self.f.close()


def main():
    path, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if cmd == "sha256":
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        print(h.hexdigest())
        return
    im = Image(path)
    if cmd == "superblock-pages":
        print(sum(len(im.programmed(b)) for b in im.sb_blocks()))
    elif cmd == "damage-superblocks":
        n = 0
        for b in im.sb_blocks():
            for ppa in im.programmed(b):
                im.flip(im.slot_off(ppa), 8)  # the magic
                n += 1
        if not n:
            sys.exit("no superblock page to damage")
        print(n)
    elif cmd == "set-wp":
        block, value = int(args[0]), int(args[1])
        old = im.wp(block)
        struct.pack_into("<H", im.m, 4096 + 16 * block, value)
        print("block %d write pointer %d -> %d" % (block, old, value))
    elif cmd == "set-version":
        # version 1 differs from 2 only in the CRCs of the table entries,
        # which a version 1 open ignores, and the seed after the header CRC
        struct.pack_into("<I", im.m, 8, int(args[0]))
        struct.pack_into("<I", im.m, 184, zlib.crc32(im.m[:184]))
        print("image version %d" % int(args[0]))
    elif cmd == "set-newest-seq":
        # the log sequence number in the spare of the newest data page
        # (after a crash: the log replay reads it), its spare CRC made valid
        newest = None
        for b in range(im.nblocks):
            for ppa in im.programmed(b):
                sp = im.spare(ppa)
                if sp and sp["type"] == PG_DATA and (newest is None or sp["seq"] > newest[0]):
                    newest = (sp["seq"], ppa)
        if newest is None:
            sys.exit("no data page")
        o = im.slot_off(newest[1]) + im.page_size
        struct.pack_into("<Q", im.m, o + 16, int(args[0]))
        struct.pack_into("<I", im.m, o + 36, crc32c(im.m[o:o + 36]))
        print("page %d: sequence %d -> %d" % (newest[1], newest[0], int(args[0])))
    elif cmd == "flip-units":
        want = {int(u) for u in args}
        newest = {}
        for b in range(im.nblocks):
            for ppa in im.programmed(b):
                sp = im.spare(ppa)
                if sp and sp["type"] == PG_DATA and sp["lba"] in want:
                    if sp["lba"] not in newest or sp["seq"] > newest[sp["lba"]][0]:
                        newest[sp["lba"]] = (sp["seq"], ppa)
        if set(newest) != want:
            sys.exit("units without a page: %s" % sorted(want - set(newest)))
        for u, (_seq, ppa) in sorted(newest.items()):
            im.flip(im.slot_off(ppa) + 100, 3)
            print("unit %d: page %d flipped" % (u, ppa))
    elif cmd in ("damage-checkpoint", "damage-checkpoint-page"):
        # page 0 of the newest checkpoint's map blocks (lba > 0: map pages,
        # and its parity pages, lba 0xFFFFFFFF): -page breaks one map page
        # (its parity rebuilds it), the other every one of them, at
        # different offsets (XOR parity would cancel equal flips)
        pages = []
        for b in range(im.nblocks):
            if b in im.sb_blocks():
                continue
            for ppa in im.programmed(b)[:1]:
                sp = im.spare(ppa)
                if sp and sp["type"] == PG_CKPT and sp["lba"] > 0:
                    pages.append((sp["seq"], sp["lba"], ppa))
        if not pages:
            sys.exit("no checkpoint map page found")
        seq = max(p[0] for p in pages)
        pages = [p for p in pages if p[0] == seq]
        if cmd == "damage-checkpoint-page":
            pages = [p for p in pages if p[1] != 0xFFFFFFFF][:1]
        for i, (_seq, _lba, ppa) in enumerate(pages):
            im.flip(im.slot_off(ppa) + 16 + 4 * i, 4)
        print("checkpoint seq %d: %d map pages damaged (%s)" % (seq, len(pages), " ".join(str(p[2]) for p in pages)))
    else:
        sys.exit("unknown command " + cmd)
    im.close()


if __name__ == "__main__":
    main()
