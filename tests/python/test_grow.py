"""`raidkit grow` (issue 15): a stopped array takes the room of members replaced by larger ones
(`--size max`, every level), a linear array takes new members (`--add`), and a RAID 0/5/6 array
takes new members by moving its data (a reshape, resumed after a kill -9); the data written
before reads back, clients see the new size, the new part is usable and (redundant levels)
consistent by scrub. What is not built yet (a running array, RAID 10, --chunk, --level) is
refused with a message saying so.
"""

import os
import subprocess
import time

import nbd
import pytest

from conftest import RAIDKIT_BIN, rng_for, run, start_nbdkit_unix

MIB = 1 << 20
SMALL = 8 * MIB
LARGE = 16 * MIB


def size_of(array):
    """The size a new NBD connection is told."""
    h = nbd.NBD()
    h.connect_uri(array.uri)
    size = h.get_size()
    h.shutdown()
    return size


def grow(*args, check=True):
    return run([RAIDKIT_BIN, "grow", *map(str, args)], check=check)


def sizes(level, count, member_bytes):
    area = member_bytes - MIB
    return {"linear": count * area, "0": count * area, "1": area, "10": count * area // 2,
            "5": (count - 1) * area, "6": (count - 2) * area}[level]


@pytest.mark.parametrize("level,count", [("linear", 2), ("0", 2), ("1", 2), ("10", 4),
                                         ("5", 3), ("6", 4)])
def test_size_max_keeps_the_data_and_serves_the_larger_size(tmp_path, arrays, level, count):
    members = [tmp_path / f"m{i}.img" for i in range(count)]
    run([RAIDKIT_BIN, "create", "-l", level, "-c", "64K", "-s", str(SMALL), "-n", "g",
         *map(str, members)])
    array = arrays(tmp_path, members).start()
    old = size_of(array)
    assert old == sizes(level, count, SMALL)
    data = rng_for(f"grow-{level}").randbytes(old)
    array.write(0, data)
    array.stop()

    for m in members:
        os.truncate(m, LARGE)
    out = grow("--size", "max", *members).stdout
    if level == "linear":
        # Only the last member of a linear array grows (the others' data would move).
        new = old + (LARGE - SMALL)
        assert "left unused" in out, out
    else:
        new = sizes(level, count, LARGE)
    assert f"grown from {old // MIB}.0 MiB to {new // MIB}.0 MiB" in out, out
    if level not in ("linear", "0"):
        assert "the new part was zeroed" in out, out

    array.start()
    assert size_of(array) == new
    assert array.read(0, old) == data, "the data written before the grow"
    assert array.read(old, new - old) == bytes(new - old), "the new part reads as zeroes"
    more = rng_for(f"grow-more-{level}").randbytes(new - old)
    array.write(old, more)
    assert array.read(old, new - old) == more
    if level not in ("linear", "0"):
        out = array.cli("scrub", "--wait").stdout
        assert " 0 mismatches" in out, out
    array.stop()
    # Grown once, nothing more to take: refused, nothing written.
    again = grow("--size", "max", *members, check=False)
    assert again.returncode != 0 and "already uses all the room" in again.stderr, again.stderr
    array.start()
    assert array.read(0, old) == data and array.read(old, new - old) == more


def test_linear_add_appends_members_and_moves_no_data(tmp_path, arrays):
    members = [tmp_path / f"m{i}.img" for i in range(2)]
    run([RAIDKIT_BIN, "create", "-l", "linear", "-s", str(SMALL), "-n", "lin",
         *map(str, members)])
    array = arrays(tmp_path, members).start()
    old = size_of(array)
    data = rng_for("linear-add").randbytes(old)
    array.write(0, data)
    array.stop()
    new = [tmp_path / f"n{i}.img" for i in range(2)]
    for n in new:
        with open(n, "wb") as f:
            f.truncate(LARGE)
    out = grow("--add", new[0], "--add", new[1], *members).stdout
    assert "grown from" in out, out
    array.members += [str(n) for n in new]
    array.start()
    assert size_of(array) == old + 2 * (LARGE - MIB)
    assert array.read(0, old) == data
    tail = rng_for("linear-add-tail").randbytes(2 * (LARGE - MIB))
    array.write(old, tail)
    array.stop()
    array.start()
    assert array.read(0, old) == data and array.read(old, len(tail)) == tail
    # Without a new member the array no longer starts: its role is missing.
    array.stop()
    log = array.start(members=array.members[:-1], expect_fail=True)
    assert "missing" in log or "too few" in log, log


def test_what_is_not_built_is_refused_and_changes_nothing(tmp_path, arrays):
    members = [tmp_path / f"m{i}.img" for i in range(3)]
    run([RAIDKIT_BIN, "create", "-l", "5", "-s", str(SMALL), "-n", "r5", *map(str, members)])
    before = [m.read_bytes()[4096:8192] for m in members]
    new = tmp_path / "new.img"
    with open(new, "wb") as f:
        f.truncate(SMALL)

    def refused(args, says, served=False):
        r = grow(*args, check=False)
        assert r.returncode != 0 and says in r.stderr, (args, r.stderr)
        if not served:  # (a server rewrites its owner record)
            assert [m.read_bytes()[4096:8192] for m in members] == before, "superblocks unchanged"

    tiny = tmp_path / "tiny.img"
    with open(tiny, "wb") as f:
        f.truncate(2 * MIB)
    refused(["--add", tiny, *members], "needs at least")
    refused(["--chunk", "64K", *members], "not do yet")
    refused(["--level", "6", *members], "not do yet")
    refused(["--size", "1G", *members], "only \"max\"")
    refused(["--size", "max", *members[:2]], "grow needs every member")
    refused(["--size", "max", *members], "already uses all the room")
    array = arrays(tmp_path, members).start()
    # Served: refused (the members are held), and --admin says the online form is not built.
    refused(["--size", "max", *members], "stop the server", served=True)
    r = subprocess.run([RAIDKIT_BIN, "grow", "--admin", str(array.admin), "--size", "max"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "running array is not built yet" in r.stderr, r.stderr


def test_remote_members_get_the_new_part_resynced(tmp_path):
    """Members that are not files (NBD exports here) cannot be zeroed cheaply: grow records a
    resync offset at the old size and the next start resyncs the new part, whose old bytes
    (different on each member) leave parity wrong until then."""
    from test_faults import Array as RemoteArray, Nbdkit

    kits = [Nbdkit(tmp_path, f"r{i}", size=SMALL) for i in range(3)]
    array = RemoteArray(tmp_path, "rg", [k.uri for k in kits], extra=["--speed-min", "100M"])
    try:
        # No used-regions map: with one, the never-written new part is zeroed at its first
        # write instead of resynced, and this test is about the resync.
        run([RAIDKIT_BIN, "create", "-l", "5", "-c", "64K", "-n", "rg", "--no-used-map",
             *[str(k.image) for k in kits]])
        for k in kits:
            k.start()
        array.start()
        old = size_of(array)
        data = rng_for("grow-remote").randbytes(old)
        array_write(array, 0, data)
        array.stop()
        for i, k in enumerate(kits):
            k.stop()
            with open(k.image, "r+b") as f:
                f.truncate(LARGE)
                f.seek(SMALL + MIB)
                f.write(rng_for(f"grow-remote-old-{i}").randbytes(2 * MIB))
            k.start()
        out = grow("--size", "max", *[k.uri for k in kits]).stdout
        new = sizes("5", 3, LARGE)
        assert "resynced in the background from array byte %d" % old in out, out
        # RAID 5: the XOR of the members' data areas is zero where parity is right.
        assert xor_of([k.image for k in kits], SMALL, LARGE) != 0, "the old bytes disagree"
        array.start()
        assert size_of(array) == new
        deadline = time.monotonic() + 120
        while True:
            st = array.status()
            if st["task"] is None and st["health"] not in ("resyncing", "rebuilding"):
                break
            assert time.monotonic() < deadline, st
            time.sleep(0.2)
        h = nbd.NBD()
        h.connect_uri(array.uri)
        assert h.pread(old, 0) == data
        h.shutdown()
        out = array.cli("scrub", "--wait").stdout
        assert " 0 mismatches" in out, out
        array.stop()
        assert xor_of([k.image for k in kits], SMALL, LARGE) == 0, "the new part resynced"
    finally:
        array.cleanup()
        for k in kits:
            k.kill()


def xor_of(paths, start, end):
    """The XOR of the files' bytes [start, end), as an integer."""
    acc = 0
    for p in paths:
        with open(p, "rb") as f:
            f.seek(start)
            acc ^= int.from_bytes(f.read(end - start), "little")
    return acc


def array_write(array, offset, data):
    h = nbd.NBD()
    h.connect_uri(array.uri)
    h.pwrite(data, offset)
    h.flush()
    h.shutdown()


def write_big(array, offset, data, piece=16 * MIB):
    for at in range(0, len(data), piece):
        array.write(offset + at, data[at:at + piece])


def read_big(array, offset, length, piece=16 * MIB):
    return b"".join(array.read(offset + at, min(piece, length - at))
                    for at in range(0, length, piece))


def grow_killed_at_progress(args, rng):
    """Runs `raidkit grow ARGS` and kills it -9 after its first progress line plus a random
    pause of up to 20 ms; returns whether the kill came before the end (its output)."""
    proc = subprocess.Popen([RAIDKIT_BIN, "grow", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out = []
    for line in proc.stdout:
        out.append(line)
        if "reshape at array byte" in line:
            time.sleep(rng.random() * 0.02)
            proc.kill()
            break
    proc.wait(timeout=60)
    rest = proc.stdout.read()
    return "".join(out) + rest + proc.stderr.read()


@pytest.mark.parametrize("level,count,added,used_map", [
    ("0", 2, 1, False), ("5", 3, 1, False), ("5", 3, 2, False), ("6", 4, 1, False),
    ("6", 4, 2, False), ("5", 3, 1, True), ("6", 4, 2, True)])
def test_add_moves_the_data_and_resumes_after_kill_9(tmp_path, arrays, level, count, added,
                                                      used_map):
    """`grow --add` on RAID 0/5/6 moves every stripe to the wider layout; killed -9 twice in the
    middle (once right after its first window, in the critical section, once in the resumed
    run), the same command run again resumes and finishes: every byte written before reads
    back, the new size is served, RAID 5/6 scrub clean and read back with a member left out.
    With the used-regions map (members full of garbage, two fifths of the array written), the
    never-written part still reads zero after the reshape, whose map is coarser."""
    member_bytes = 64 * MIB
    members = [tmp_path / f"m{i}.img" for i in range(count)]
    new = [tmp_path / f"n{i}.img" for i in range(added)]
    rng = rng_for(f"reshape-{level}-{count}-{added}-{used_map}")
    for p in members + new:
        with open(p, "wb") as f:
            if used_map:
                f.write(rng.randbytes(member_bytes))
            else:
                f.truncate(member_bytes)
    run([RAIDKIT_BIN, "create", "-l", level, "-c", "64K", "-n", "rs",
         *([] if used_map else ["--no-used-map"]), "--force", *map(str, members)])
    array = arrays(tmp_path, members).start()
    old = size_of(array)
    assert old == sizes(level, count, member_bytes)
    written = old * 2 // 5 // 4096 * 4096 if used_map else old
    data = rng.randbytes(written) + bytes(old - written)
    write_big(array, 0, data[:written])
    assert read_big(array, 0, old) == data, "before the reshape"
    array.stop()

    args = [a for n in new for a in ("--add", n)] + (["--force"] if used_map else []) + members
    first = grow_killed_at_progress(args, rng)
    assert "reshape recorded" in first and "grown from" not in first, first
    # Mid-reshape, serving is refused with the command that finishes it.
    log = array.start(members=[*map(str, members), *map(str, new)], expect_fail=True)
    assert "in the middle of a reshape" in log and "raidkit grow" in log, log
    second = grow_killed_at_progress(args, rng)
    assert "resuming" in second and "grown from" not in second, second
    done = grow(*args).stdout
    assert "resuming" in done and "grown from" in done, done

    array.members += [str(n) for n in new]
    grown = sizes(level, count + added, member_bytes)
    array.start()
    assert size_of(array) == grown
    assert read_big(array, 0, old) == data, "the data written before the reshape"
    assert read_big(array, old, grown - old) == bytes(grown - old), "the grown part reads zero"
    if level != "0":
        out = array.cli("scrub", "--wait").stdout
        assert " 0 mismatches" in out, out
    array.stop()
    if level != "0":
        for left_out in (0, count):
            kept = [m for i, m in enumerate(array.members) if i != left_out]
            array.start(members=kept)
            assert read_big(array, 0, old) == data, f"without member {left_out}"
            array.stop()


def test_reshape_refusals_name_the_array_and_the_remedy(tmp_path):
    members = [tmp_path / f"m{i}.img" for i in range(4)]
    run([RAIDKIT_BIN, "create", "-l", "10", "-s", str(SMALL), "-n", "r10", *map(str, members)])
    new = tmp_path / "new.img"
    with open(new, "wb") as f:
        f.truncate(SMALL)
    r = grow("--add", new, *members, check=False)
    assert r.returncode != 0 and "r10" in r.stderr and "raid10 array is not built" in r.stderr, \
        r.stderr


def test_an_encrypted_array_is_reshaped_without_its_key_and_stays_ciphertext(tmp_path, arrays):
    """Encryption sits above the RAID with the array sector as its tweak, and a reshape keeps
    every byte's array offset: `grow --add` (no key given) moves ciphertext untouched. After it
    the data reads back through the key, the new member holds its key area (the array opens
    with it), and no member, the new one included, holds the plaintext."""
    members = [tmp_path / f"m{i}.img" for i in range(3)]
    new = tmp_path / "n0.img"
    for p in members + [new]:
        with open(p, "wb") as f:
            f.truncate(16 * MIB)
    key = tmp_path / "key"
    key.write_bytes(os.urandom(64))
    run([RAIDKIT_BIN, "create", "-l", "5", "-c", "64K", "-n", "encrs", "--encrypt",
         "--key-file", str(key), "--kdf-memory", "64K", "--kdf-iterations", "1",
         *map(str, members)])
    array = arrays(tmp_path, members).start("--key-file", str(key))
    old = size_of(array)
    tag = rng_for("encrypted-reshape").randrange(10**8)
    data = b"".join(b"RAIDKIT-PLAIN-%08d-%08d\n" % (tag, i) for i in range(old // 32))
    write_big(array, 0, data)
    array.stop()

    done = grow("--add", new, *members).stdout
    assert "reshape recorded" in done and "grown from" in done, done
    array.members.append(str(new))
    array.start("--key-file", str(key))
    assert size_of(array) == sizes("5", 4, 16 * MIB)
    assert read_big(array, 0, old) == data, "the data written before the reshape"
    array.stop()
    needle = b"RAIDKIT-PLAIN-%08d-" % tag
    assert [str(p) for p in members + [new] if needle in p.read_bytes()] == [], \
        "plaintext on a member after the reshape"
    # The new member carries the key area: with an old member left out, the array still opens
    # and reads back through the key.
    array.start("--key-file", str(key), members=[*map(str, members[1:]), str(new)])
    assert read_big(array, 0, old) == data, "without member 0"
    array.stop()


def nbdkit_failable(tmp_path, image):
    """nbdkit serving `image`, every read and write failing with EIO once the returned flag
    file exists (the error filter)."""
    sock = tmp_path / f"{image.stem}.sock"
    flag = tmp_path / f"{image.stem}.fail"
    proc = start_nbdkit_unix(sock, [
        "--filter=error", "file", str(image), "error=EIO",
        "error-pread-rate=100%", f"error-pread-file={flag}",
        "error-pwrite-rate=100%", f"error-pwrite-file={flag}",
        "error-zero-rate=100%", f"error-zero-file={flag}",
        "error-trim-rate=100%", f"error-trim-file={flag}"])
    return proc, f"nbd+unix:///?socket={sock}", flag


@pytest.mark.parametrize("level,count", [("5", 3), ("6", 4)])
def test_a_member_failing_mid_reshape_stops_it_and_the_named_command_finishes_it(
        tmp_path, arrays, level, count):
    """A RAID 5/6 `grow --add` whose member 1 (served by nbdkit) starts failing every read and
    write in the middle of the move stops, naming the member and printing the command without
    it; that command finishes the reshape degraded (the member's role recorded missing): every
    byte reads back at the new size, RAID 6 also with a second member left out, and the failed
    member is refused by a later grow run, its data being stale."""
    member_bytes = 64 * MIB
    members = [tmp_path / f"m{i}.img" for i in range(count)]
    new = tmp_path / "n0.img"
    rng = rng_for(f"reshape-fail-{level}")
    for p in members + [new]:
        with open(p, "wb") as f:
            f.truncate(member_bytes)
    run([RAIDKIT_BIN, "create", "-l", level, "-c", "64K", "-n", "rf", "--no-used-map",
         *map(str, members)])
    array = arrays(tmp_path, members).start()
    old = size_of(array)
    data = rng.randbytes(old)
    write_big(array, 0, data)
    array.stop()

    kit, uri, flag = nbdkit_failable(tmp_path, members[1])
    try:
        given = [members[0], uri, *members[2:]]
        proc = subprocess.Popen([RAIDKIT_BIN, "grow", "--add", str(new), *map(str, given)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out = []
        for line in proc.stdout:
            out.append(line)
            if "reshape at array byte" in line:
                flag.touch()
                break
        rest, err = proc.communicate(timeout=120)
        out = "".join(out) + rest
        assert proc.returncode != 0, f"the grow finished although {uri} failed:\n{out}{err}"
        assert f"member {uri} failed during the reshape" in err, err
        assert "nothing is lost" in err, err
        command = err.strip().splitlines()[-1].split()
        assert command[:2] == ["raidkit", "grow"], err
        assert uri not in command and str(new) in command, command
    finally:
        kit.kill()
        kit.wait()
    done = run([RAIDKIT_BIN, *command[1:]]).stdout
    assert "resuming" in done and "grown from" in done, done

    kept = [members[0], *members[2:], new]
    grown = sizes(level, count + 1, member_bytes)
    array.start(members=[str(m) for m in kept])
    assert size_of(array) == grown
    assert read_big(array, 0, old) == data, "the data written before the reshape"
    assert read_big(array, old, grown - old) == bytes(grown - old), "the grown part reads zero"
    array.stop()
    if level == "6":
        array.start(members=[str(m) for m in kept[1:]])
        assert read_big(array, 0, old) == data, "without member 1 and member 0"
        array.stop()
    # The failed member's data is stale: a grow given it again refuses it.
    r = grow("--size", "max", *members, new, check=False)
    assert r.returncode != 0 and str(members[1]) in r.stderr, r.stderr
