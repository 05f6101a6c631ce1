//! Serves a RAM disk over NBD, for manual testing with nbdinfo, qemu-io, nbdcopy, nbdfuse.
//!
//! ```text
//! cargo run -p nbd --example memserve -- [--unix PATH | --tcp HOST:PORT] [--size MiB] [--read-only]
//! nbdinfo nbd+unix:///?socket=PATH
//! ```
//! Stops on Ctrl-C after answering requests in flight.

use std::io;
use std::sync::{Arc, RwLock};

use nbd::{Export, Listener, ServerConfig, StatusExtent};

struct RamDisk {
    bytes: RwLock<Vec<u8>>,
}

impl RamDisk {
    fn check(&self, offset: u64, len: usize) -> usize {
        let size = self.bytes.read().expect("lock").len();
        let end = offset as usize + len;
        assert!(end <= size, "server validated the range");
        offset as usize
    }
}

impl Export for RamDisk {
    fn size(&self) -> u64 {
        self.bytes.read().expect("lock").len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = self.check(offset, buf.len());
        buf.copy_from_slice(&self.bytes.read().expect("lock")[at..at + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> io::Result<()> {
        let at = self.check(offset, data.len());
        self.bytes.write().expect("lock")[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_zeroes(offset, len, true)
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> io::Result<()> {
        let at = self.check(offset, len as usize);
        self.bytes.write().expect("lock")[at..at + len as usize].fill(0);
        Ok(())
    }
    fn block_status(&self, _offset: u64, len: u32) -> io::Result<Vec<StatusExtent>> {
        Ok(vec![StatusExtent::data(len)])
    }
    fn preferred_block_size(&self) -> u32 {
        64 << 10
    }
    fn can_multi_conn(&self) -> bool {
        true // One shared buffer, nothing cached per connection.
    }
    fn can_fast_zero(&self) -> bool {
        true
    }
}

struct Args {
    unix: Option<String>,
    tcp: Option<String>,
    size_mib: u64,
    read_only: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        unix: None,
        tcp: None,
        size_mib: 64,
        read_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--unix" => args.unix = Some(value()?),
            "--tcp" => args.tcp = Some(value()?),
            "--size" => args.size_mib = value()?.parse().map_err(|e| format!("--size: {e}"))?,
            "--read-only" => args.read_only = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let listener = match (&args.unix, &args.tcp) {
        (Some(path), _) => Listener::bind_unix(path)?,
        (None, Some(addr)) => Listener::bind_tcp(addr.parse()?).await?,
        (None, None) => Listener::bind_tcp("127.0.0.1:10809".parse()?).await?,
    };
    let size = usize::try_from(args.size_mib << 20)?;
    let export = Arc::new(RamDisk {
        bytes: RwLock::new(vec![0; size]),
    });
    let config = ServerConfig {
        export_name: "mem".into(),
        description: format!("{} MiB RAM disk", args.size_mib),
        read_only: args.read_only,
        ..ServerConfig::default()
    };
    println!(
        "memserve: serving {} MiB at {}",
        args.size_mib,
        listener.uri("mem")
    );
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    nbd::serve(listener, export, config, stop).await?;
    Ok(())
}
