//! [`Kernel`]: one implementation of the parity operations, chosen once at run time.
//!
//! Every operation is written as a [`Combination`] (a linear combination over GF(2^8)); a kernel
//! is just the loop that executes combinations: byte by byte (`Portable`), or with AVX2 /
//! AVX-512+GFNI vectors (module `x86`), the sub-vector tail always byte by byte.

use std::sync::OnceLock;

use crate::combination::{Combination, Output, Source, Sources};
use crate::gf::{gf_inv, gf_pow2, two_data_coefficients};
use crate::stripe::{check_data_count, classify, common_len, Lost};

/// An implementation of the parity operations. [`Kernel::best`] is what the top-level functions
/// use; tests and benchmarks pick one explicitly from [`Kernel::available`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// Combinations executed byte by byte with table multiplies; runs everywhere.
    Portable,
    /// 32-byte vectors; GF multiply by split-nibble `vpshufb` table lookups.
    Avx2,
    /// 32-byte vectors; GF multiply as one `vgf2p8affineqb` bit-matrix product.
    Avx2Gfni,
    /// 64-byte vectors; GF multiply as one `vgf2p8affineqb` bit-matrix product.
    Avx512Gfni,
}

/// Environment variable that forces a kernel (`portable`, `avx2`, `avx512gfni`), if available.
pub const KERNEL_ENV: &str = "RAIDKIT_PARITY_KERNEL";

impl Kernel {
    /// All kernels, slowest first.
    pub const ALL: [Kernel; 4] = [
        Kernel::Portable,
        Kernel::Avx2,
        Kernel::Avx2Gfni,
        Kernel::Avx512Gfni,
    ];

    /// Short lowercase name, as accepted by [`KERNEL_ENV`].
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable",
            Kernel::Avx2 => "avx2",
            Kernel::Avx2Gfni => "avx2gfni",
            Kernel::Avx512Gfni => "avx512gfni",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn is_available(self) -> bool {
        match self {
            Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Gfni => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Gfni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The kernels this CPU can run, slowest first.
    pub fn available() -> Vec<Kernel> {
        Kernel::ALL
            .into_iter()
            .filter(|k| k.is_available())
            .collect()
    }

    /// The fastest available kernel, or the one [`KERNEL_ENV`] names if it is available.
    /// Decided once per process.
    pub fn best() -> Kernel {
        static BEST: OnceLock<Kernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            let fastest = *Kernel::available()
                .last()
                .expect("Portable is always available");
            match std::env::var(KERNEL_ENV) {
                Ok(name) => Kernel::ALL
                    .into_iter()
                    .find(|k| k.name() == name && k.is_available())
                    .unwrap_or(fastest),
                Err(_) => fastest,
            }
        })
    }

    /// Executes a combination over its whole length.
    fn run(self, mut combination: Combination) {
        assert!(
            self.is_available(),
            "parity kernel {} is not available on this CPU",
            self.name()
        );
        let done = match self {
            Kernel::Portable => 0,
            // SAFETY: `is_available` asserted above that the CPU has AVX2.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { crate::x86::avx2::run(&mut combination) },
            // SAFETY: `is_available` asserted above that the CPU has AVX2 and GFNI.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Gfni => unsafe { crate::x86::avx2::run_gfni(&mut combination) },
            // SAFETY: `is_available` asserted above that the CPU has AVX-512F/BW and GFNI.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Gfni => unsafe { crate::x86::avx512::run(&mut combination) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("non-x86 kernels are never available"),
        };
        combination.run_scalar_from(done);
    }

    /// dst ^= src (equal lengths).
    pub fn xor_into(self, dst: &mut [u8], src: &[u8]) {
        let sources = [Source::data(src, 0)];
        self.run(Combination::new(&sources, &mut [Output::p(dst, true)]));
    }

    /// dst = XOR of all srcs (all equal length, at least one src).
    pub fn xor_gen(self, srcs: &[&[u8]], dst: &mut [u8]) {
        assert!(!srcs.is_empty(), "xor_gen: at least one source is required");
        let mut sources = Sources::new();
        for &data in srcs {
            sources.push(Source::data(data, 0));
        }
        let mut outputs = [Output::p(dst, false)];
        self.run(Combination::new(sources.as_slice(), &mut outputs));
    }

    /// P = XOR of data; Q = sum over i of g^i * data[i] (as Linux md).
    pub fn pq_gen(self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        check_data_count(data.len());
        let mut sources = Sources::new();
        for (i, &data) in data.iter().enumerate() {
            sources.push(Source::data(data, gf_pow2(i)));
        }
        let mut outputs = [Output::p(p, false), Output::q(q, false)];
        self.run(Combination::new(sources.as_slice(), &mut outputs));
    }

    /// p ^= delta; q ^= g^data_index * delta.
    pub fn pq_update(self, delta: &[u8], data_index: usize, p: &mut [u8], q: Option<&mut [u8]>) {
        let Some(q) = q else {
            return self.xor_into(p, delta);
        };
        check_data_count(data_index + 1);
        let sources = [Source::data(delta, gf_pow2(data_index))];
        let mut outputs = [Output::p(p, true), Output::q(q, true)];
        self.run(Combination::new(&sources, &mut outputs));
    }

    /// Rebuild up to two lost blocks in place (see the crate-level `reconstruct`).
    pub fn reconstruct(self, blocks: &mut [&mut [u8]], has_q: bool, lost: &[usize]) {
        let (n, loss) = classify(blocks.len(), has_q, lost);
        common_len(blocks.iter().map(|b| b.len()));
        let (p, q) = (n, n + 1);
        let recipe = match loss {
            Lost::Nothing => return,
            Lost::Data(x) => Recipe::new(&[(x, 1, 0)], true, false, true, false),
            Lost::P => Recipe::new(&[(p, 1, 0)], true, false, false, false),
            Lost::Q => Recipe::new(&[(q, 0, 1)], false, true, false, false),
            Lost::PQ => Recipe::new(&[(p, 1, 0), (q, 0, 1)], true, true, false, false),
            Lost::DataQ(x) => {
                Recipe::new(&[(x, 1, 0), (q, gf_pow2(x), 1)], true, true, true, false)
            }
            Lost::DataP(x) => {
                let inv = gf_inv(gf_pow2(x));
                Recipe::new(&[(x, 0, inv), (p, 1, inv)], true, true, false, true)
            }
            Lost::DataData(x, y) => {
                let (a, b) = two_data_coefficients(x, y);
                Recipe::new(&[(x, a, b), (y, 1 ^ a, b)], true, true, true, true)
            }
        };
        self.solve(blocks, n, &recipe);
    }

    /// Computes the recipe's lost blocks from the surviving ones.
    fn solve(self, blocks: &mut [&mut [u8]], n: usize, recipe: &Recipe) {
        let lost = &recipe.lost[..recipe.lost_count];
        let mut taken: [&mut [u8]; 2] = [&mut [], &mut []];
        for (slot, &(index, _, _)) in taken.iter_mut().zip(lost) {
            *slot = std::mem::take(&mut blocks[index]);
        }
        let is_lost = |index: usize| lost.iter().any(|&(l, _, _)| l == index);
        let mut sources = Sources::new();
        for (i, block) in blocks[..n].iter().enumerate().filter(|(i, _)| !is_lost(*i)) {
            let q_coef = if recipe.data_q { gf_pow2(i) } else { 0 };
            sources.push(Source {
                data: block,
                to_p: recipe.data_p,
                q_coef,
            });
        }
        if recipe.p_in {
            sources.push(Source::data(blocks[n], 0));
        }
        if recipe.q_in {
            sources.push(Source {
                data: blocks[n + 1],
                to_p: false,
                q_coef: 1,
            });
        }
        let [first, second] = &mut taken;
        let output = |data, &(_, p_coef, q_coef): &(usize, u8, u8)| Output {
            data,
            p_coef,
            q_coef,
            accumulate: false,
        };
        let mut outputs = [
            output(&mut **first, &recipe.lost[0]),
            output(&mut **second, &recipe.lost[1]),
        ];
        self.run(Combination::new(
            sources.as_slice(),
            &mut outputs[..lost.len()],
        ));
        for (data, &(index, _, _)) in taken.into_iter().zip(lost) {
            blocks[index] = data;
        }
    }
}

/// How to rebuild lost blocks: which survivors feed p and q, and each lost block's coefficients
/// on p and q.
struct Recipe {
    /// (block index, p_coef, q_coef) for each lost block.
    lost: [(usize, u8, u8); 2],
    lost_count: usize,
    /// Surviving data blocks feed p / feed q with coefficient g^i.
    data_p: bool,
    data_q: bool,
    /// The P block feeds p; the Q block feeds q (coefficient 1).
    p_in: bool,
    q_in: bool,
}

impl Recipe {
    fn new(lost: &[(usize, u8, u8)], data_p: bool, data_q: bool, p_in: bool, q_in: bool) -> Recipe {
        assert!((1..=2).contains(&lost.len()));
        let mut slots = [(usize::MAX, 0, 0); 2];
        slots[..lost.len()].copy_from_slice(lost);
        Recipe {
            lost: slots,
            lost_count: lost.len(),
            data_p,
            data_q,
            p_in,
            q_in,
        }
    }
}
