//! Validation at the edge: each client mistake maps to the NBD error the spec asks for.

use super::*;

fn session() -> Session {
    Session {
        size: 1 << 20,
        transmission_flags: FLAG_HAS_FLAGS | FLAG_SEND_FUA | FLAG_SEND_WRITE_ZEROES,
        structured: true,
        base_allocation: true,
        max_request_bytes: 32 << 20,
        can_fast_zero: false,
    }
}

fn req(kind: u16, flags: u16, offset: u64, length: u32) -> Request {
    Request {
        flags,
        kind,
        cookie: 7,
        offset,
        length,
    }
}

fn errno_of(r: Request, s: &Session) -> u32 {
    validate(&r, s)
        .expect_err("request should be refused")
        .errno
}

#[test]
fn accepts_valid_requests() {
    let s = session();
    assert_eq!(
        validate(&req(CMD_READ, 0, 0, 4096), &s),
        Ok(Command::Read {
            offset: 0,
            length: 4096
        })
    );
    let w = validate(&req(CMD_WRITE, CMD_FLAG_FUA, 512, 1), &s);
    assert_eq!(
        w,
        Ok(Command::Write {
            offset: 512,
            length: 1,
            fua: true
        })
    );
    let z = validate(&req(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 0, 1 << 20), &s);
    assert_eq!(
        z,
        Ok(Command::WriteZeroes {
            offset: 0,
            length: 1 << 20,
            may_trim: false,
            fua: false
        })
    );
    assert_eq!(validate(&req(CMD_FLUSH, 0, 0, 0), &s), Ok(Command::Flush));
    assert_eq!(
        validate(&req(CMD_DISC, 0, 0, 0), &s),
        Ok(Command::Disconnect)
    );
    let b = validate(&req(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 0, 10), &s);
    assert_eq!(
        b,
        Ok(Command::BlockStatus {
            offset: 0,
            length: 10,
            req_one: true
        })
    );
    // Zero-length reads and writes at the very end are harmless.
    assert!(validate(&req(CMD_READ, 0, 1 << 20, 0), &s).is_ok());
}

#[test]
fn refuses_client_mistakes() {
    let s = session();
    assert_eq!(errno_of(req(99, 0, 0, 1), &s), EINVAL);
    assert_eq!(errno_of(req(CMD_READ, CMD_FLAG_NO_HOLE, 0, 1), &s), EINVAL);
    assert_eq!(errno_of(req(CMD_READ, 1 << 15, 0, 1), &s), EINVAL);
    assert_eq!(errno_of(req(CMD_READ, 0, (1 << 20) - 1, 2), &s), EINVAL);
    assert_eq!(errno_of(req(CMD_READ, 0, u64::MAX, 2), &s), EINVAL);
    assert_eq!(errno_of(req(CMD_TRIM, 0, 1 << 20, 1), &s), EINVAL);
    assert_eq!(errno_of(req(CMD_WRITE, 0, 1 << 20, 1), &s), ENOSPC);
    assert_eq!(errno_of(req(CMD_WRITE_ZEROES, 0, 1 << 20, 1), &s), ENOSPC);
    assert_eq!(errno_of(req(CMD_READ, 0, 0, (32 << 20) + 1), &s), EINVAL);
    assert_eq!(errno_of(req(CMD_FLUSH, 0, 1, 0), &s), EINVAL);
    assert_eq!(errno_of(req(CMD_BLOCK_STATUS, 0, 0, 0), &s), EINVAL);
    assert_eq!(
        errno_of(req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 1), &s),
        ENOTSUP
    );
}

#[test]
fn session_state_changes_what_is_allowed() {
    let mut s = session();
    s.structured = false;
    assert_eq!(errno_of(req(CMD_READ, CMD_FLAG_DF, 0, 1), &s), EINVAL);
    s.base_allocation = false;
    assert_eq!(errno_of(req(CMD_BLOCK_STATUS, 0, 0, 1), &s), EINVAL);
    s.transmission_flags = FLAG_HAS_FLAGS | FLAG_READ_ONLY;
    assert_eq!(errno_of(req(CMD_WRITE, 0, 0, 1), &s), EPERM);
    assert_eq!(errno_of(req(CMD_TRIM, 0, 0, 1), &s), EPERM);
    assert_eq!(errno_of(req(CMD_WRITE_ZEROES, 0, 0, 1), &s), EPERM);
    // Without SEND_FUA, FUA is an unknown flag.
    assert_eq!(errno_of(req(CMD_READ, CMD_FLAG_FUA, 0, 1), &s), EINVAL);
    s.can_fast_zero = true;
    s.transmission_flags = FLAG_HAS_FLAGS;
    assert!(validate(&req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 1), &s).is_ok());
}

#[test]
fn descriptors_follow_the_spec() {
    let e = |length, hole| StatusExtent {
        length,
        hole,
        zero: hole,
    };
    let d = descriptors(
        &[e(100, false), e(0, true), e(50, true), e(10, false)],
        120,
        false,
    );
    let d = d.expect("extents");
    assert_eq!(d.len(), 2, "stops once the request is covered");
    assert_eq!(
        d[1],
        BlockDescriptor {
            length: 50,
            status: STATE_HOLE | STATE_ZERO
        }
    );
    let one = descriptors(&[e(500, false)], 120, true).expect("extents");
    assert_eq!(
        one,
        vec![BlockDescriptor {
            length: 120,
            status: 0
        }]
    );
    assert!(descriptors(&[], 10, false).is_err());
}

#[test]
fn replies_have_the_right_shape() {
    let data = |bytes: Vec<u8>| Done::Data(Buffer::from_vec(bytes));
    let (head, data_out) = success_reply(9, 4096, data(vec![1; 10]), true);
    assert_eq!(head.len(), 28);
    assert_eq!(data_out.as_deref(), Some(&[1u8; 10][..]));
    let (head, data_out) = success_reply(9, 0, data(vec![1; 10]), false);
    assert_eq!((head.len(), data_out.map(|d| d.len())), (16, Some(10)));
    let (head, _) = success_reply(9, 0, data(Vec::new()), true);
    assert_eq!(
        head.len(),
        20,
        "zero-length structured read is one NONE chunk"
    );
    assert_eq!(error_reply(9, EIO, "boom", false).len(), 16);
    assert_eq!(error_reply(9, EIO, "boom", true).len(), 20 + 6 + 4);
}
