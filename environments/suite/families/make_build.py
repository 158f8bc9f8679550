"""make-build: a multi-file C project whose Makefile is broken; build, run, save the output.

The task: fix the one planted Makefile bug (a missing object, -lm, -Iinclude, or spaces for
tabs) without changing what the program computes, then save its output over the sample files.
The expected output is computed on the host by a Python mirror of the program; the check
compares the saved output with it, and rebuilds from a clean copy of the project with a plain
`make` to compare again.
"""

from __future__ import annotations

import math
import random
import zlib

from obsspec.environments.suite.families._common import WORDS
from obsspec.environments.suite.registry import GeneratedTask, family

C_HEADER = """#ifndef @GUARD@
#define @GUARD@

#include <stddef.h>
#include <stdint.h>

#define DIGEST_SEED @SEED@ULL

struct file_stats {
    uint64_t lines, words, bytes;
    int in_word;
    uint64_t counts[256];
};

void crc32_init(void);
uint32_t crc32_update(uint32_t crc, const unsigned char *buf, size_t len);
uint64_t digest_update(uint64_t h, const unsigned char *buf, size_t len);
void stats_init(struct file_stats *st);
void stats_update(struct file_stats *st, const unsigned char *buf, size_t len);
double entropy_bits(const struct file_stats *st);
@ROUNDS@
#endif
"""

C_CRC32 = """#include "@PROG@.h"

static uint32_t table[256];

void crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
}

uint32_t crc32_update(uint32_t crc, const unsigned char *buf, size_t len)
{
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = table[(crc ^ buf[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}
"""

C_STATS = """#include <ctype.h>
#include <math.h>
#include <string.h>

#include "@PROG@.h"

void stats_init(struct file_stats *st)
{
    memset(st, 0, sizeof *st);
}

void stats_update(struct file_stats *st, const unsigned char *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = buf[i];
        st->counts[c]++;
        st->bytes++;
        if (c == '\\n')
            st->lines++;
        if (isspace(c)) {
            st->in_word = 0;
        } else if (!st->in_word) {
            st->in_word = 1;
            st->words++;
        }
    }
}

/* Shannon entropy of the byte distribution, in bits per byte. */
double entropy_bits(const struct file_stats *st)
{
    double h = 0.0;
    for (int i = 0; i < 256; i++) {
        if (st->counts[i]) {
            double p = (double)st->counts[i] / (double)st->bytes;
            h -= p * log2(p);
        }
    }
    return h;
}
"""

C_MAIN = """#include <stdio.h>
#include <string.h>

#include "@PROG@.h"

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int report(const char *path)
{
    static unsigned char buf[65536];
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    struct file_stats st;
    stats_init(&st);
    uint32_t crc = 0;
    uint64_t digest = DIGEST_SEED;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        stats_update(&st, buf, n);
        crc = crc32_update(crc, buf, n);
        digest = digest_update(digest, buf, n);
    }
    fclose(f);
    printf("%s\\t%llu\\t%llu\\t%llu\\t%08x\\t%016llx\\t%.4f\\n", base_name(path),
           (unsigned long long)st.lines, (unsigned long long)st.words,
           (unsigned long long)st.bytes, (unsigned)crc, (unsigned long long)digest,
           entropy_bits(&st));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE...\\n", argv[0]);
        return 2;
    }
    crc32_init();
    int status = 0;
    for (int i = 1; i < argc; i++)
        status |= report(argv[i]);
    return status;
}
"""

C_MAKEFILE = """CC = gcc
CFLAGS = -O2 -Wall -Wextra -Iinclude
LDLIBS = -lm
PROG = build/@PROG@
OBJS = @ROUND_OBJS@ \\
       build/crc32.o build/digest.o build/stats.o build/main.o

all: $(PROG)

$(PROG): $(OBJS)
\t$(CC) $(LDFLAGS) -o $@ $(OBJS) $(LDLIBS)

# Objects depend on the Makefile too, so changed flags rebuild everything.
build/%.o: src/%.c include/@PROG@.h Makefile
\t@mkdir -p build
\t$(CC) $(CFLAGS) -c -o $@ $<

clean:
\trm -rf build

.PHONY: all clean
"""

C_SAMPLES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
C_PROGS = ["filesig", "fprint", "sigscan", "textsum", "docstat", "hashwalk", "checkdoc"]
C_ROUNDS = (3, 4)  # ~0.5 s of gcc -O2 per generated round file on one CPU
MASK64 = (1 << 64) - 1


def _round_tables(rng: random.Random, count: int) -> list[list[tuple[int, int, int]]]:
    """Per round, per byte value: (xor constant, odd multiplier, shift)."""
    return [
        [(rng.getrandbits(64), rng.getrandbits(64) | 1, rng.randrange(7, 41)) for _ in range(256)]
        for _ in range(count)
    ]


def _round_source(index: int, table: list[tuple[int, int, int]]) -> str:
    cases = "\n".join(
        f"    case {b}: h = (h ^ 0x{x:016x}ULL) * 0x{m:016x}ULL; h ^= h >> {s}; break;"
        for b, (x, m, s) in enumerate(table)
    )
    return (
        f"/* Generated file: do not edit. */\n#include <stdint.h>\n\n"
        f"uint64_t round_{index}(uint64_t h, unsigned b)\n{{\n    switch (b) {{\n{cases}\n"
        "    default: break;\n    }\n    return h;\n}\n"
    )


def _digest_source(prog: str, rounds: int) -> str:
    calls = "".join(f"        h = round_{r}(h, buf[i]);\n" for r in range(rounds))
    return (
        f'#include "{prog}.h"\n\nuint64_t digest_update(uint64_t h, const unsigned char *buf, '
        f"size_t len)\n{{\n    for (size_t i = 0; i < len; i++) {{\n{calls}    }}\n"
        "    return h;\n}\n"
    )


def _signature(name: str, data: bytes, seed: int, tables: list) -> str:
    """What the C program prints for one file (a Python mirror of it)."""
    h = seed
    for b in data:
        for table in tables:
            x, m, s = table[b]
            h = ((h ^ x) * m) & MASK64
            h ^= h >> s
    counts = [0] * 256
    for b in data:
        counts[b] += 1
    entropy = 0.0
    for c in counts:
        if c:
            p = c / len(data)
            entropy -= p * math.log2(p)
    lines = data.count(b"\n")
    return (
        f"{name}\t{lines}\t{len(data.split())}\t{len(data)}\t"
        f"{zlib.crc32(data):08x}\t{h:016x}\t{entropy:.4f}"
    )


def _sample_text(rng: random.Random) -> bytes:
    lines = []
    for _ in range(rng.randint(40, 120)):
        words = [rng.choice(WORDS) for _ in range(rng.randint(0, 14))]
        if words and rng.random() < 0.3:
            words[0] = words[0].capitalize()
        lines.append(" ".join(words) + ("." if words and rng.random() < 0.5 else ""))
    return ("\n".join(lines) + "\n").encode()


def _break_makefile(rng: random.Random, makefile: str, rounds: int) -> tuple[str, str]:
    """(broken Makefile, the sed command that fixes it)."""
    bug = rng.choice(["missing_object", "missing_libm", "missing_include", "spaces"])
    if bug == "missing_object":
        gone = f"build/round_{rng.randrange(rounds)}.o"
        broken = makefile.replace(f"{gone} ", "", 1)
        return broken, f"sed -i 's|^OBJS = |OBJS = {gone} |' Makefile"
    if bug == "missing_libm":
        return (
            makefile.replace("LDLIBS = -lm", "LDLIBS ="),
            "sed -i 's/^LDLIBS =.*/LDLIBS = -lm/' Makefile",
        )
    if bug == "missing_include":
        return (makefile.replace(" -Iinclude", ""), "sed -i 's/^CFLAGS = .*/& -Iinclude/' Makefile")
    return makefile.replace("\t", "    "), "sed -i 's/^    /\\t/' Makefile"


@family("make-build")
def make_build(rng: random.Random) -> GeneratedTask:
    prog = rng.choice(C_PROGS)
    proj = f"/root/{prog}"
    rounds = rng.randint(*C_ROUNDS)
    tables = _round_tables(rng, rounds)
    seed = rng.getrandbits(64)
    names = sorted(rng.sample(C_SAMPLES, rng.randint(3, 5)))
    samples = {f"{n}.txt": _sample_text(rng) for n in names}
    subs = {
        "@PROG@": prog,
        "@GUARD@": f"{prog.upper()}_H",
        "@SEED@": f"0x{seed:016x}",
        "@ROUNDS@": "".join(
            f"uint64_t round_{r}(uint64_t h, unsigned b);\n" for r in range(rounds)
        ),
        "@ROUND_OBJS@": " ".join(f"build/round_{r}.o" for r in range(rounds)),
    }

    def fill(template: str) -> str:
        for key, value in subs.items():
            template = template.replace(key, value)
        return template

    makefile, fix = _break_makefile(rng, fill(C_MAKEFILE), rounds)
    files: dict[str, str | bytes] = {
        "Makefile": makefile,
        f"include/{prog}.h": fill(C_HEADER),
        "src/main.c": fill(C_MAIN),
        "src/crc32.c": fill(C_CRC32),
        "src/stats.c": fill(C_STATS),
        "src/digest.c": _digest_source(prog, rounds),
        **{f"src/round_{r}.c": _round_source(r, t) for r, t in enumerate(tables)},
        **{f"samples/{n}": data for n, data in samples.items()},
    }
    expected = "".join(_signature(n, d, seed, tables) + "\n" for n, d in sorted(samples.items()))
    out = f"/root/{prog}-signatures.tsv"
    instruction = f"""
`{proj}` is a small C program, `{prog}`, that prints a signature line (line, word and byte
counts, CRC-32, a 64-bit digest and the byte entropy) for every file it is given. Its build is
broken: `make` in `{proj}` fails.

1. Fix the build so that a plain `make` in `{proj}` (also from a clean tree) produces the
   binary `build/{prog}`. Do not change what the program computes.
2. Run `build/{prog}` on all the files in `{proj}/samples/`, in file-name order, and save its
   standard output to `{out}`.
"""
    check = f"""[ -f {out} ] || {{ echo "FAIL: {out} missing"; exit 1; }}
diff {out} /tests/expected.tsv || {{ echo "FAIL: {out} differs"; exit 1; }}
rm -rf /tmp/verify && cp -a {proj} /tmp/verify && cd /tmp/verify && rm -rf build
make > /tmp/verify.log 2>&1 || {{ tail -n 20 /tmp/verify.log; echo "FAIL: make"; exit 1; }}
./build/{prog} samples/*.txt | diff - /tests/expected.tsv
"""
    solution = [
        f"cd {proj} && ls -R && cat Makefile",
        "make 2>&1 | tail -n 5",
        fix,
        f"make 2>&1 | tail -n 3 && ./build/{prog} samples/*.txt > {out}",
        f"cat {out}",
    ]
    return GeneratedTask(
        instruction=instruction,
        setup_sh=f"mkdir -p {proj} && cp -r project/. {proj}/\n",
        check_sh=check,
        solution=solution,
        setup_files={f"project/{k}": v for k, v in files.items()},
        test_files={"expected.tsv": expected},
    )
