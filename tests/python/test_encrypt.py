"""Encryption at rest (`raidkit create --encrypt`, `serve --key-file`): a known pattern written
through NBD is found in no member file and no journal file of an encrypted array, and found in
them without encryption; the data survives a restart and a member rebuild (the rebuild runs with
no key: below the encryption layer everything is ciphertext); a wrong key and a missing key are
refused with a clear message; an array made before encryption existed still opens; a
passphrase typed at the terminal's prompt (a pty as serve's controlling terminal) opens the
array, and a wrong one typed is refused; the VAES and the portable XTS implementations
(`RAIDKIT_CRYPT`) write the same ciphertext and read each other's arrays.
"""

import gzip
import os
import re
import shutil
import warnings
from pathlib import Path

import nbd
import pytest

from conftest import RAIDKIT_BIN, rng_for, run

MIB = 1 << 20
MEMBER_BYTES = 8 * MIB
# Cheap key derivation: the tests check the logic, not the cost.
KDF = ["--kdf-memory", "64K", "--kdf-iterations", "1"]
DATA = Path(__file__).resolve().parent / "data"


def pattern(name, size):
    """Text no cipher output contains by chance: 32-byte records with a per-test tag."""
    tag = rng_for(name).randrange(10**8)
    return b"".join(b"RAIDKIT-PLAIN-%08d-%08d\n" % (tag, i) for i in range(size // 32))


def holders(paths, needle):
    """The files among `paths` whose bytes contain `needle`."""
    return [str(p) for p in paths if needle in Path(p).read_bytes()]


@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypted", "plain"])
def test_pattern_is_in_no_member_and_no_journal_only_when_encrypted(tmp_path, arrays, encrypt):
    members = [tmp_path / f"m{i}.img" for i in range(3)]
    journal = tmp_path / "journal.img"
    key = tmp_path / "key"
    key.write_bytes(os.urandom(64))
    enc = ["--encrypt", "--key-file", str(key), *KDF] if encrypt else []
    run([RAIDKIT_BIN, "create", "-l", "5", "-c", "64K", "-s", str(MEMBER_BYTES), "-n", "enc",
         "--journal", str(journal), "--journal-mode", "write-back", "--journal-size", "16M",
         *enc, *map(str, members)])
    serve_key = ["--key-file", str(key)] if encrypt else []
    array = arrays(tmp_path, members, ["--journal", str(journal)]).start(*serve_key)
    data = pattern("pattern_in_members", 3 * MIB)
    # Aligned, then unaligned (a unit's read-modify-write), then a few bytes.
    array.write(0, data[: 2 * MIB])
    array.write(2 * MIB + 100, data[2 * MIB:])
    array.write(5 * MIB + 3, b"RAIDKIT-PLAIN-small")
    record = data[: 32 * 4]
    # While served (the write-back journal holds the writes) and after a clean stop.
    served = holders(members + [journal], record)
    assert array.read(0, len(data) // 2) == data[: len(data) // 2]
    array.stop()
    stopped = holders(members + [journal], record)
    small = holders(members + [journal], b"RAIDKIT-PLAIN-small")
    if encrypt:
        assert served == [] and stopped == [] and small == [], (served, stopped, small)
        # Not a blank area either: the ciphertext is there.
        assert any(Path(m).read_bytes()[MIB:2 * MIB].count(0) < MIB // 2 for m in members)
    else:
        assert str(journal) in served and str(journal) in stopped, (served, stopped)
        assert any(m in stopped for m in map(str, members)), stopped
        assert small, "the small write is in the clear without encryption"
    # The data survives a restart.
    array.start(*serve_key)
    assert array.read(0, 2 * MIB) == data[: 2 * MIB]
    assert array.read(2 * MIB + 100, len(data) - 2 * MIB) == data[2 * MIB:]
    assert array.read(5 * MIB + 3, 19) == b"RAIDKIT-PLAIN-small"
    array.stop()


def test_wrong_and_missing_keys_are_refused_and_the_right_passphrase_opens(tmp_path, arrays):
    members = [tmp_path / f"m{i}.img" for i in range(2)]
    passphrase = tmp_path / "pass"
    passphrase.write_text("correct horse battery staple\n")
    run([RAIDKIT_BIN, "create", "-l", "1", "-s", str(MEMBER_BYTES), "-n", "locked",
         "--encrypt", "--passphrase-file", str(passphrase), *KDF, *map(str, members)])
    wrong = tmp_path / "wrong"
    wrong.write_text("correct horse battery stapler\n")
    array = arrays(tmp_path, members)
    log = array.start("--passphrase-file", str(wrong), expect_fail=True)
    assert "does not open any of the 1 key slots" in log, log
    assert 'array "locked"' in log, log
    log = array.start(expect_fail=True)
    assert "standard input is not a terminal" in log and "--key-file" in log, log
    # A key given for an array that is not encrypted is refused (the operator expects
    # encryption), never ignored.
    plain = [tmp_path / f"p{i}.img" for i in range(2)]
    run([RAIDKIT_BIN, "create", "-l", "1", "-s", str(MEMBER_BYTES), "-n", "plain",
         *map(str, plain)])
    log = arrays(tmp_path, plain).start("--passphrase-file", str(passphrase), expect_fail=True)
    assert "is not encrypted" in log, log
    # The passphrase file's final newline is not part of the passphrase.
    passphrase.write_text("correct horse battery staple")
    array.start("--passphrase-file", str(passphrase))
    array.write(4096, b"x" * 4096)
    assert array.read(4096, 4096) == b"x" * 4096
    # A new array reads zeroes where nothing was written.
    assert array.read(MIB, 65536) == bytes(65536)
    array.stop()
    examined = run([RAIDKIT_BIN, "examine", str(members[0])]).stdout
    assert "aes-xts-plain64" in examined and "slot 0" in examined, examined


def test_a_member_is_rebuilt_without_the_key_and_the_data_reads_back(tmp_path, arrays):
    members = [tmp_path / f"m{i}.img" for i in range(3)]
    spare = tmp_path / "spare.img"
    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    run([RAIDKIT_BIN, "create", "-l", "5", "-c", "64K", "-s", str(MEMBER_BYTES), "-n", "rb",
         "--encrypt", "--key-file", str(key), *KDF, "--spare", str(spare), *map(str, members)])
    array = arrays(tmp_path, members + [spare]).start("--key-file", str(key))
    data = pattern("rebuild", 4 * MIB)
    array.write(MIB // 2 + 7, data)
    array.cli("fail", str(members[1]))
    # The spare rebuilds role 1 from the others' ciphertext and parity: no key involved.
    array.cli("status", "--watch", timeout=300)
    status = run([RAIDKIT_BIN, "status", "--json", "--admin", str(array.admin)]).stdout
    assert '"degraded"' not in status, status
    assert array.read(MIB // 2 + 7, len(data)) == data
    array.stop()
    assert holders(members + [spare], data[:128]) == []
    # Without the failed member: the rebuilt spare serves its role.
    survivors = [members[0], members[2], spare]
    array.start("--key-file", str(key), members=[str(m) for m in survivors])
    assert array.read(MIB // 2 + 7, len(data)) == data
    array.stop()


def has_vaes():
    """Whether this processor runs the VAES implementation (AES-NI, AVX-512F and VAES)."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return {"aes", "avx512f", "vaes"} <= flags


def data_areas(member):
    """The member's data area (from `raidkit examine`: data offset, data bytes)."""
    examined = run([RAIDKIT_BIN, "examine", str(member)]).stdout
    offset = int(re.search(r"data offset\s+(\d+)", examined).group(1))
    length = int(re.search(r"data bytes\s+(\d+)", examined).group(1))
    return Path(member).read_bytes()[offset:offset + length]


def test_the_vaes_and_portable_paths_write_the_same_ciphertext_and_read_each_other(
        tmp_path, arrays):
    """RAIDKIT_CRYPT=portable runs the XTS path of a processor without VAES end to end: two
    copies of one encrypted RAID 5 get the same writes, one through VAES, one through the
    portable path; their members' data areas are byte-identical, and each copy reads back
    through the other implementation. Without VAES here both copies go through the portable
    path (then the test says so: it cannot compare the two)."""
    vaes = has_vaes()
    first = "vaes" if vaes else "auto"
    if not vaes:
        warnings.warn("this processor has no VAES: both copies run the portable path, the "
                      "VAES one is not compared")
    key = tmp_path / "key"
    key.write_bytes(os.urandom(64))
    copies = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        copies[name] = [tmp_path / name / f"m{i}.img" for i in range(3)]
    run([RAIDKIT_BIN, "create", "-l", "5", "-c", "64K", "-s", str(MEMBER_BYTES), "-n", "xts",
         "--encrypt", "--key-file", str(key), *KDF, *map(str, copies["a"])])
    for src, dst in zip(copies["a"], copies["b"]):
        shutil.copyfile(src, dst)
    data = pattern("vaes_and_portable", 3 * MIB)
    implementations = {"a": first, "b": "portable"}
    want_line = {"vaes": "AES-256-XTS, vaes implementation",
                 "auto": "AES-256-XTS, portable implementation",
                 "portable": "AES-256-XTS, portable implementation"}
    served = {}
    for name, members in copies.items():
        served[name] = arrays(tmp_path / name, members)
        implementation = implementations[name]
        array = served[name].start("--key-file", str(key),
                                   env={"RAIDKIT_CRYPT": implementation})
        log = array.log.read_text()
        assert want_line[implementation] in log, log
        # Whole units, a unit's read-modify-write at both ends, and a few bytes.
        array.write(0, data[: 2 * MIB])
        array.write(2 * MIB + 100, data[2 * MIB:])
        array.write(5 * MIB + 3, b"RAIDKIT-PLAIN-small")
        array.stop()
    for a, b in zip(copies["a"], copies["b"]):
        ciphertext = data_areas(a)
        assert data[:128] not in ciphertext
        # 3 MiB over a RAID 5 of 3: about 1.5 MiB of data and parity on each member.
        assert len(ciphertext) - ciphertext.count(0) > MIB, "no ciphertext was written"
        assert ciphertext == data_areas(b), f"{a.name}: the two implementations differ"
    # Each copy read through the other implementation.
    for name, other in (("a", "portable"), ("b", first)):
        array = served[name].start("--key-file", str(key), env={"RAIDKIT_CRYPT": other})
        assert want_line[other] in array.log.read_text(), array.log.read_text()
        assert array.read(0, 2 * MIB) == data[: 2 * MIB], name
        assert array.read(2 * MIB + 100, len(data) - 2 * MIB) == data[2 * MIB:], name
        assert array.read(5 * MIB + 3, 19) == b"RAIDKIT-PLAIN-small", name
        array.stop()


def test_a_crypt_setting_that_cannot_be_had_is_refused_before_anything_opens(tmp_path):
    members = [tmp_path / f"m{i}.img" for i in range(2)]
    key = tmp_path / "key"
    key.write_bytes(os.urandom(64))
    cmd = [RAIDKIT_BIN, "create", "-l", "1", "-s", str(MEMBER_BYTES), "-n", "bad", "--encrypt",
           "--key-file", str(key), *KDF, *map(str, members)]
    refused = run(cmd, check=False, env={**os.environ, "RAIDKIT_CRYPT": "soft"})
    assert refused.returncode != 0, refused.stdout
    assert 'RAIDKIT_CRYPT="soft"' in refused.stderr, refused.stderr
    assert "auto, portable or vaes" in refused.stderr, refused.stderr
    assert not any(m.exists() for m in members), "a member was made before the refusal"
    vaes = run(cmd, check=False, env={**os.environ, "RAIDKIT_CRYPT": "vaes"})
    if has_vaes():
        assert vaes.returncode == 0, vaes.stderr
    else:
        assert vaes.returncode != 0 and "lacks AES-NI, AVX-512F or VAES" in vaes.stderr


def test_an_array_made_before_encryption_still_opens(tmp_path, arrays):
    members = []
    for name in ("m0", "m1"):
        path = tmp_path / f"{name}.img"
        with gzip.open(DATA / "v1-raid1" / f"{name}.gz") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        members.append(path)
    want = b"".join(b"raidkit v1 format pattern %06d " % i for i in range(4096))[:65536]
    examined = run([RAIDKIT_BIN, "examine", str(members[0])]).stdout
    assert "oldformat" in examined and "encrypt" not in examined, examined
    array = arrays(tmp_path, members).start()
    assert array.read(MIB, len(want)) == want
    array.write(0, b"still writable")
    array.stop()
    array.start()
    assert array.read(0, 14) == b"still writable"
    array.stop()


def test_key_add_change_remove_never_the_last(tmp_path, arrays):
    members = [tmp_path / f"m{i}.img" for i in range(2)]
    k1 = tmp_path / "k1"
    k1.write_bytes(os.urandom(64))
    p1, p2, bad = tmp_path / "p1", tmp_path / "p2", tmp_path / "bad"
    p1.write_text("first passphrase\n")
    p2.write_text("second passphrase\n")
    bad.write_text("not a key of this array\n")
    ms = list(map(str, members))
    run([RAIDKIT_BIN, "create", "-l", "1", "-s", str(MEMBER_BYTES), "-n", "keys", "--encrypt",
         "--key-file", str(k1), *KDF, *ms])
    array = arrays(tmp_path, members)
    array.start("--key-file", str(k1))
    array.write(0, b"kept through every key change")
    # Not while served (its members are held; the running array rewrites its superblocks from
    # its own copy).
    served = run([RAIDKIT_BIN, "key", "add", "--key-file", str(k1), "--new-passphrase-file",
                  str(p1), *KDF, *ms], check=False)
    assert served.returncode != 0 and "in use by another array" in served.stderr, served.stderr
    array.stop()

    def key(*args, ok=True):
        proc = run([RAIDKIT_BIN, "key", *args, *ms], check=ok)
        return proc.stdout + proc.stderr

    def opens(*flag):
        array.start(*flag)
        data = array.read(0, 29)
        array.stop()
        return data == b"kept through every key change"

    # A key the array does not open cannot add one.
    out = key("add", "--passphrase-file", str(bad), "--new-passphrase-file", str(p1), *KDF,
              ok=False)
    assert "does not open any of the 1 key slots" in out, out
    out = key("add", "--key-file", str(k1), "--new-passphrase-file", str(p1), *KDF)
    assert "key slot 1" in out, out
    examined = run([RAIDKIT_BIN, "examine", ms[1]]).stdout
    assert "key slot 0" in examined and "key slot 1" in examined, examined
    assert opens("--passphrase-file", str(p1)) and opens("--key-file", str(k1))
    # Change: the slot p1 opened now opens with p2 only.
    out = key("change", "--passphrase-file", str(p1), "--new-passphrase-file", str(p2), *KDF)
    assert "key slot 1" in out, out
    log = array.start("--passphrase-file", str(p1), expect_fail=True)
    assert "does not open" in log, log
    assert opens("--passphrase-file", str(p2))
    # Remove the key file's slot: it no longer opens; the last slot is never removed.
    out = key("remove", "--key-file", str(k1))
    assert "key slot 0 removed" in out, out
    log = array.start("--key-file", str(k1), expect_fail=True)
    assert "does not open" in log, log
    out = key("remove", "--passphrase-file", str(p2), ok=False)
    assert "last" in out, out
    assert opens("--passphrase-file", str(p2))
    # On every member: each one's own superblock holds the same slots.
    for m in ms:
        text = run([RAIDKIT_BIN, "examine", m]).stdout
        assert "key slot 1" in text and "key slot 0" not in text, text


def test_the_daemon_unlocks_with_its_config_keys_and_scan_notes_them(tmp_path):
    from test_daemon import Daemon
    key = tmp_path / "vault.key"
    key.write_bytes(os.urandom(64))
    files = {}
    for name, enc in (("vault", ["--encrypt", "--key-file", str(key), *KDF]),
                      ("locked", ["--encrypt", "--key-file", str(key), *KDF]),
                      ("open", [])):
        files[name] = [tmp_path / f"{name}{i}" for i in range(2)]
        run([RAIDKIT_BIN, "create", "-l", "1", "-n", name, "-s", "8M", *enc,
             *map(str, files[name])])
    scan = run([RAIDKIT_BIN, "examine", "--scan", f"{tmp_path}/*[01]"]).stdout
    entries = scan.split("\n\n")
    vault = next(e for e in entries if 'name = "vault"' in e)
    plain = next(e for e in entries if 'name = "open"' in e)
    assert "# encrypted: add key_file" in vault, scan
    assert "encrypted" not in plain, scan
    locked = next(e for e in entries if 'name = "locked"' in e)
    config = tmp_path / "raidkit.toml"
    config.write_text(f'[daemon]\nunix = "{tmp_path}/nbd.sock"\nadmin = "{tmp_path}/a.sock"\n\n'
                      + vault + f'key_file = "{key}"\n\n' + locked + "\n" + plain + "\n")
    daemon = Daemon(config, 2)
    try:
        assert sorted(daemon.serving) == ["open", "vault"]
        h = nbd.NBD()
        h.connect_uri(daemon.serving["vault"])
        h.pwrite(b"RAIDKIT-PLAIN-daemon" * 100, 4096)
        h.flush()
        assert h.pread(2000, 4096) == b"RAIDKIT-PLAIN-daemon" * 100
        h.shutdown()
    finally:
        log = daemon.stop()
        daemon.kill()
    assert 'array "locked" not started' in log and "is encrypted" in log, log
    assert "key_file" in log, log
    assert holders(files["vault"], b"RAIDKIT-PLAIN-daemon") == []
    # key_file and passphrase_file together are refused by the check.
    config.write_text(config.read_text().replace(
        f'key_file = "{key}"\n', f'key_file = "{key}"\npassphrase_file = "{key}"\n'))
    proc = run([RAIDKIT_BIN, "daemon", "--config", str(config), "--check-config"], check=False)
    assert proc.returncode != 0 and "not both" in proc.stderr, proc.stderr


def block_map(uri):
    """nbdinfo --map's extents as (offset, length, zero) runs, adjacent alike ones merged."""
    import json
    extents = json.loads(run(["nbdinfo", "--map", "--json", uri], timeout=60).stdout)
    runs = []
    for e in extents:
        zero = bool(e["type"] & 2)
        if runs and runs[-1][2] == zero and runs[-1][0] + runs[-1][1] == e["offset"]:
            runs[-1] = (runs[-1][0], runs[-1][1] + e["length"], zero)
        else:
            runs.append((e["offset"], e["length"], zero))
    return runs


def test_block_status_of_an_encrypted_array_shows_its_zero_units(tmp_path, arrays):
    """nbdinfo --map through the encryption layer: a new array is all zero; after writes the
    512-byte units written are data and the rest still zero (a unit whose ciphertext is all
    zero reads as zeroes); reading what the map calls zero gives zeroes."""
    members = [tmp_path / f"m{i}.img" for i in range(2)]
    key = tmp_path / "key"
    key.write_bytes(os.urandom(64))
    run([RAIDKIT_BIN, "create", "-l", "1", "-s", str(MEMBER_BYTES), "-n", "map", "--encrypt",
         "--key-file", str(key), *KDF, *map(str, members)])
    array = arrays(tmp_path, members).start("--key-file", str(key))
    try:
        first = block_map(array.uri)
        assert len(first) == 1 and first[0][0] == 0 and first[0][2], first
        size = first[0][1]
        array.write(MIB, pattern("map", 64 * 1024))
        array.write(3 * MIB + 100, b"x" * 100)
        assert block_map(array.uri) == [
            (0, MIB, True),
            (MIB, 64 * 1024, False),
            (MIB + 64 * 1024, 2 * MIB - 64 * 1024, True),
            (3 * MIB, 512, False),
            (3 * MIB + 512, size - 3 * MIB - 512, True),
        ]
        assert array.read(3 * MIB, 100) == bytes(100)
        assert array.read(3 * MIB + 100, 100) == b"x" * 100
    finally:
        array.stop()


def slots(member):
    """The key slot lines `raidkit examine` prints for one member."""
    text = run([RAIDKIT_BIN, "examine", str(member)]).stdout
    return [line.strip() for line in text.splitlines() if "key slot" in line]


@pytest.mark.parametrize("opened_with", ["old", "new"])
def test_a_key_change_cut_short_still_opens_and_the_next_start_makes_members_agree(
        tmp_path, arrays, opened_with):
    """`raidkit key change` rewrites the members' superblocks one by one; a crash between two
    leaves some with the new slots and some with the old. Made here exactly: the second member
    is put back as it was before the change (the change writes only superblocks). The array
    then opens with the old key and with the new one, and after one start every member holds
    the same slots."""
    members = [tmp_path / f"m{i}.img" for i in range(2)]
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_text("the old passphrase\n")
    new.write_text("the new passphrase\n")
    ms = list(map(str, members))
    run([RAIDKIT_BIN, "create", "-l", "1", "-s", str(MEMBER_BYTES), "-n", "cut", "--encrypt",
         "--passphrase-file", str(old), *KDF, *ms])
    array = arrays(tmp_path, members).start("--passphrase-file", str(old))
    array.write(0, b"survives a key change cut short")
    array.stop()
    before = members[1].read_bytes()
    # The new slot's KDF passes differ, so `examine` tells the two states apart.
    run([RAIDKIT_BIN, "key", "change", "--passphrase-file", str(old), "--new-passphrase-file",
         str(new), "--kdf-memory", "64K", "--kdf-iterations", "2", *ms])
    changed = slots(members[0])
    assert slots(members[1]) == changed, "the change completed on both"
    members[1].write_bytes(before)  # the crash: the second member never rewritten
    slots_before = slots(members[1])
    assert slots_before != changed, "the cut-short state differs"

    def opens(passphrase):
        array.start("--passphrase-file", str(passphrase))
        data = array.read(0, 31)
        array.stop()
        return data == b"survives a key change cut short"

    # Both keys open the cut-short array (checked without a start that would rewrite it: the
    # first start is the one under test below).
    key = old if opened_with == "old" else new
    assert opens(key)
    after = [slots(m) for m in members]
    assert after[0] == after[1], f"members disagree after a start: {after}"
    # The agreed slots are one of the two states: its key opens the array, the other's not.
    assert after[0] in (changed, slots_before), after
    holds, lost = (new, old) if after[0] == changed else (old, new)
    assert opens(holds)
    log = array.start("--passphrase-file", str(lost), expect_fail=True)
    assert "does not open" in log, log


def _pty_serve(tmp_path, members, typed):
    """`raidkit serve` of `members` on a terminal of its own (a pty as its controlling
    terminal, as a person at a console), each of `typed` sent after the next prompt; returns
    (pid, master fd, everything it printed so far, socket path)."""
    import pty
    import select
    import time
    sock = tmp_path / "prompt.sock"
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(RAIDKIT_BIN, [RAIDKIT_BIN, "serve", "--unix", str(sock),
                               *map(str, members)])
    out = b""
    answers = list(typed)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break  # the child closed the terminal (it exited)
        if not chunk:
            break
        out += chunk
        if answers and out.rstrip().endswith(b":"):
            # As a person would: after the prompt is shown (typing before the prompt has
            # turned echo off would show the characters; whether it did is not asserted).
            time.sleep(0.3)
            os.write(fd, answers.pop(0).encode() + b"\n")
        if b"raidkit: serving" in out:
            break
    return pid, fd, out.decode(errors="replace"), sock


def test_a_passphrase_typed_at_the_terminal_opens_and_a_wrong_one_is_refused(tmp_path):
    import signal
    members = [tmp_path / f"m{i}.img" for i in range(2)]
    passphrase = tmp_path / "pass"
    passphrase.write_text("correct horse battery staple\n")
    run([RAIDKIT_BIN, "create", "-l", "1", "-s", str(MEMBER_BYTES), "-n", "typed",
         "--encrypt", "--passphrase-file", str(passphrase), *KDF, *map(str, members)])
    # A wrong passphrase typed: refused, the process exits non-zero.
    pid, fd, out, _ = _pty_serve(tmp_path, members, ["correct horse battery stapler"])
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert "assphrase" in out, out  # it asked
    assert os.waitstatus_to_exitcode(status) != 0, out
    assert "does not open any of the 1 key slots" in out, out
    # The right one typed: served, and the data path works.
    pid, fd, out, sock = _pty_serve(tmp_path, members, ["correct horse battery staple"])
    try:
        assert "raidkit: serving" in out, out
        h = nbd.NBD()
        h.connect_uri(f"nbd+unix:///?socket={sock}")
        h.pwrite(b"t" * 4096, 0)
        assert h.pread(4096, 0) == b"t" * 4096
        h.shutdown()
    finally:
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, out
