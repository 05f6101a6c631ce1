//! Arithmetic in GF(2^8) with the RAID-6 polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d) and
//! generator g = 2, exactly as Linux md (lib/raid6) uses it.
//!
//! Tables are computed at compile time; every lookup is bounds-checked by construction
//! (indices are `u8` or reduced modulo 255).

/// The reduction polynomial without its x^8 term.
pub const POLY_LOW: u8 = 0x1d;

/// Largest number of data blocks a RAID-6 stripe may have: the coefficients g^0 .. g^254 are
/// distinct, g^255 = g^0, so beyond 255 data blocks two would share a Q coefficient and two-block
/// recovery would be impossible.
pub const MAX_DATA_BLOCKS: usize = 255;

/// Multiply by 2 (x) and reduce: the step md's syndrome code performs on every byte.
pub const fn mul2(a: u8) -> u8 {
    let shifted = a << 1;
    if a & 0x80 != 0 {
        shifted ^ POLY_LOW
    } else {
        shifted
    }
}

/// a * b by shift-and-add (usable in const tables; runtime code uses the log tables).
pub const fn mul_const(mut a: u8, mut b: u8) -> u8 {
    let mut product = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            product ^= a;
        }
        a = mul2(a);
        b >>= 1;
    }
    product
}

const fn build_exp() -> [u8; 510] {
    let mut exp = [0u8; 510];
    let mut value: u8 = 1;
    let mut i = 0;
    while i < 510 {
        exp[i] = value;
        value = mul2(value);
        i += 1;
    }
    exp
}

const fn build_log(exp: &[u8; 510]) -> [u8; 256] {
    let mut log = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        log[exp[i] as usize] = i as u8;
        i += 1;
    }
    log
}

/// EXP[i] = g^i for i in 0..510 (doubled so a sum of two logs needs no reduction).
static EXP: [u8; 510] = build_exp();
/// LOG[a] = i with g^i = a, for a != 0 (LOG[0] is meaningless and never read).
static LOG: [u8; 256] = build_log(&build_exp());

/// a * b in GF(2^8) / 0x11d.
pub fn gf_mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
}

/// g^i (g = 2); the exponent is taken modulo 255, the order of g.
pub fn gf_pow2(i: usize) -> u8 {
    EXP[i % 255]
}

/// Multiplicative inverse of a non-zero element.
pub fn gf_inv(a: u8) -> u8 {
    assert!(a != 0, "gf_inv: zero has no inverse in GF(2^8)");
    EXP[255 - LOG[a as usize] as usize]
}

/// a / b for non-zero b.
pub fn gf_div(a: u8, b: u8) -> u8 {
    gf_mul(a, gf_inv(b))
}

/// Coefficients (a, b) with d_x = a * Pxy ^ b * Qxy when data blocks x < y are both lost, where
/// Pxy = d_x ^ d_y and Qxy = g^x d_x ^ g^y d_y (md's raid6_2data_recov:
/// a = g^(y-x) / (g^(y-x) + 1), b = 1 / (g^x + g^y)).
pub fn two_data_coefficients(x: usize, y: usize) -> (u8, u8) {
    assert!(x < y, "two_data_coefficients: need x < y, got x={x} y={y}");
    assert!(
        y < MAX_DATA_BLOCKS,
        "two_data_coefficients: data index {y} out of range"
    );
    let g_diff = gf_pow2(y - x);
    let a = gf_div(g_diff, g_diff ^ 1);
    let b = gf_inv(gf_pow2(x) ^ gf_pow2(y));
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_multiply_matches_bitwise_multiply_for_all_pairs() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(gf_mul(a, b), mul_const(a, b), "a={a:#x} b={b:#x}");
            }
        }
    }

    #[test]
    fn generator_has_order_255_and_known_powers() {
        assert_eq!(gf_pow2(0), 1);
        assert_eq!(gf_pow2(7), 0x80);
        assert_eq!(gf_pow2(8), 0x1d);
        assert_eq!(gf_pow2(9), 0x3a);
        assert_eq!(gf_pow2(255), 1);
        let mut seen = [false; 256];
        for i in 0..255 {
            let v = gf_pow2(i);
            assert!(!seen[v as usize], "g^{i} repeats");
            seen[v as usize] = true;
        }
    }

    #[test]
    fn inverse_and_division_round_trip() {
        for a in 1..=255u8 {
            assert_eq!(gf_mul(a, gf_inv(a)), 1, "a={a:#x}");
            for b in [1u8, 2, 0x1d, 0x8e, 0xff] {
                assert_eq!(gf_mul(gf_div(a, b), b), a);
            }
        }
    }

    #[test]
    fn two_data_coefficients_solve_the_system() {
        for (x, y) in [(0, 1), (0, 7), (3, 4), (10, 200), (0, 254)] {
            let (a, b) = two_data_coefficients(x, y);
            for (dx, dy) in [(0x12u8, 0x34u8), (0xff, 0x01), (0, 0x80)] {
                let pxy = dx ^ dy;
                let qxy = gf_mul(gf_pow2(x), dx) ^ gf_mul(gf_pow2(y), dy);
                assert_eq!(gf_mul(a, pxy) ^ gf_mul(b, qxy), dx, "x={x} y={y}");
            }
        }
    }
}
