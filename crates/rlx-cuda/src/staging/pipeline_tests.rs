//! The pipeline over a fake engine whose stream runs queued work only when a mark is polled
//! or waited on (a random amount when polled): a slot reused before its upload ran, or a
//! download handed over before its copy ran, shows as wrong bytes or a failed snapshot check.

use super::*;

enum Op {
    H2d {
        dst: u64,
        at: usize,
        snapshot: Vec<u8>,
    },
    D2h {
        at: usize,
        src: u64,
        len: usize,
    },
    Mark(u64),
}

struct Fake {
    host: Vec<u8>,
    device: Vec<u8>,
    queue: VecDeque<Op>,
    executed: u64,
    next_mark: u64,
    rng: u64,
    fail_h2d: bool,
    fail_d2h: bool,
}

impl Fake {
    fn new(capacity: usize, device: usize, seed: u64) -> Fake {
        Fake {
            host: vec![0xAB; capacity],
            device: vec![0; device],
            queue: VecDeque::new(),
            executed: 0,
            next_mark: 0,
            rng: seed | 1,
            fail_h2d: false,
            fail_d2h: false,
        }
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn run_one(&mut self) -> bool {
        let Some(op) = self.queue.pop_front() else {
            return false;
        };
        match op {
            Op::H2d { dst, at, snapshot } => {
                let len = snapshot.len();
                assert_eq!(
                    &self.host[at..at + len],
                    &snapshot[..],
                    "pool bytes at {at} changed before their upload ran"
                );
                self.device[dst as usize..dst as usize + len].copy_from_slice(&snapshot);
            }
            Op::D2h { at, src, len } => {
                let src = src as usize;
                self.host[at..at + len].copy_from_slice(&self.device[src..src + len]);
            }
            Op::Mark(id) => self.executed = id,
        }
        true
    }
}

impl Engine for Fake {
    type Mark = u64;

    fn host(&mut self) -> &mut [u8] {
        &mut self.host
    }

    fn h2d(&mut self, dst: u64, at: usize, len: usize) -> Result<(), CudaError> {
        if self.fail_h2d {
            return Err(internal("injected h2d failure".into()));
        }
        let snapshot = self.host[at..at + len].to_vec();
        self.queue.push_back(Op::H2d { dst, at, snapshot });
        Ok(())
    }

    fn d2h(&mut self, at: usize, src: u64, len: usize) -> Result<(), CudaError> {
        if self.fail_d2h {
            return Err(internal("injected d2h failure".into()));
        }
        self.queue.push_back(Op::D2h { at, src, len });
        Ok(())
    }

    fn record(&mut self, _spare: Option<u64>) -> Result<u64, CudaError> {
        self.next_mark += 1;
        self.queue.push_back(Op::Mark(self.next_mark));
        Ok(self.next_mark)
    }

    fn is_done(&mut self, mark: &u64) -> Result<bool, CudaError> {
        let steps = self.random() % 4;
        for _ in 0..steps {
            self.run_one();
        }
        Ok(self.executed >= *mark)
    }

    fn wait(&mut self, mark: &u64) -> Result<(), CudaError> {
        while self.executed < *mark {
            assert!(self.run_one(), "waited for mark {mark} never recorded");
        }
        Ok(())
    }
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn download_all(p: &mut Pipeline<Fake>, copies: &[(u64, usize)]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = copies.iter().map(|&(_, n)| vec![0; n]).collect();
    let mut next: Vec<usize> = vec![0; copies.len()];
    p.download(copies, &mut |i, off, b| {
        assert_eq!(off, next[i], "copy {i}: chunks out of order");
        next[i] += b.len();
        out[i][off..off + b.len()].copy_from_slice(b);
    })
    .unwrap();
    assert_eq!(next, copies.iter().map(|c| c.1).collect::<Vec<_>>());
    out
}

#[test]
fn chunk_plans_cover_the_copy() {
    assert_eq!(chunks(0, 4).count(), 0);
    assert_eq!(chunks(10, 4).collect::<Vec<_>>(), [(0, 4), (4, 4), (8, 2)]);
    assert_eq!(chunks(8, 4).collect::<Vec<_>>(), [(0, 4), (4, 4)]);
    assert_eq!(chunks(3, 0).count(), 3);
    for (len, chunk) in [(1usize, 1usize), (4097, 4096), (1 << 20, 3000)] {
        let mut end = 0;
        for (off, n) in chunks(len, chunk) {
            assert!(off == end && n > 0 && n <= chunk);
            end = off + n;
        }
        assert_eq!(end, len);
    }
}

#[test]
fn large_host_copies_split_over_threads_copy_every_byte() {
    let src = bytes(7, 3 * PARALLEL_COPY + 7);
    let mut dst = vec![0u8; src.len()];
    copy_host(&mut dst, &src);
    assert_eq!(dst, src);
}

#[test]
fn random_uploads_and_downloads_match_a_model_of_the_device() {
    let (capacity, device) = (64 << 10, 1 << 20);
    for seed in 1..6u64 {
        let mut p = Pipeline::new(Fake::new(capacity, device, seed), capacity, 8 << 10);
        assert_eq!(p.chunk(), 8 << 10);
        let mut model = vec![0u8; device];
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..60 {
            let n = 1 + next() as usize % 4;
            let mut copies = Vec::new();
            for _ in 0..n {
                let len = match next() % 4 {
                    0 => 1 + next() as usize % 64,
                    1 => 1 + next() as usize % (20 << 10),
                    _ => 1 + next() as usize % (200 << 10),
                };
                let dst = next() as usize % (device - len);
                copies.push((dst as u64, len));
            }
            if round % 3 == 2 {
                let got = download_all(&mut p, &copies);
                for (&(src, len), g) in copies.iter().zip(&got) {
                    let src = src as usize;
                    assert_eq!(&g[..], &model[src..src + len], "seed {seed} round {round}");
                }
            } else {
                let data: Vec<Vec<u8>> =
                    copies.iter().map(|&(_, len)| bytes(next(), len)).collect();
                let batch: Vec<(u64, &[u8])> = copies
                    .iter()
                    .zip(&data)
                    .map(|(&(dst, _), d)| (dst, &d[..]))
                    .collect();
                p.upload(&batch).unwrap();
                for (&(dst, len), d) in copies.iter().zip(&data) {
                    model[dst as usize..dst as usize + len].copy_from_slice(d);
                }
            }
        }
        p.flush().unwrap();
        assert_eq!(p.in_flight_bytes(), 0);
        while p.engine_mut().run_one() {}
        assert!(
            p.engine_mut().device == model,
            "seed {seed}: device differs"
        );
        let s = p.stats();
        assert!(
            s.waits > 0 && s.marks > 0 && s.uploaded > 0 && s.downloaded > 0,
            "{s:?}"
        );
    }
}

#[test]
fn a_copy_larger_than_the_pool_streams_through_it() {
    let capacity = 16 << 10;
    let mut p = Pipeline::new(Fake::new(capacity, 1 << 20, 3), capacity, 1 << 20);
    assert_eq!(p.chunk(), 8 << 10);
    let data = bytes(11, 300_001);
    p.upload(&[(5, &data)]).unwrap();
    let got = download_all(&mut p, &[(5, data.len())]);
    assert!(got[0] == data);
    assert_eq!(p.stats().chunks, 2 * 300_001u64.div_ceil(8 << 10));
}

#[test]
fn failed_copies_leave_the_pool_usable() {
    let capacity = 32 << 10;
    let mut p = Pipeline::new(Fake::new(capacity, 1 << 20, 5), capacity, 4 << 10);
    let data = bytes(13, 50_000);
    p.upload(&[(0, &data)]).unwrap();
    p.engine_mut().fail_h2d = true;
    assert!(p.upload(&[(100_000, &data)]).is_err());
    p.engine_mut().fail_h2d = false;
    p.engine_mut().fail_d2h = true;
    let mut sink = |_: usize, _: usize, _: &[u8]| {};
    assert!(p.download(&[(0, 10_000)], &mut sink).is_err());
    p.engine_mut().fail_d2h = false;
    for round in 0..5u64 {
        let more = bytes(17 + round, 70_000);
        p.upload(&[(200_000, &more)]).unwrap();
        let got = download_all(&mut p, &[(0, data.len()), (200_000, more.len())]);
        assert!(got[0] == data && got[1] == more, "round {round}");
    }
    p.flush().unwrap();
    assert_eq!(p.in_flight_bytes(), 0);
}

#[test]
fn empty_copies_do_nothing() {
    let mut p = Pipeline::new(Fake::new(8192, 4096, 1), 8192, 4096);
    p.upload(&[(0, &[])]).unwrap();
    assert!(download_all(&mut p, &[(0, 0)])[0].is_empty());
    assert_eq!(p.stats().chunks, 0);
}
