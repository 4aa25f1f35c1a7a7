//! omx_dump: omx frames in omx's own words, one line per frame, captured live on an
//! interface or read from a pcap file; writes pcap files that Wireshark (with
//! dist/wireshark/omx.lua) and tshark read. For hosts without Wireshark.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::exit;
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use omx_tools::dump::{describe, parse_mac, pcap, render, type_names, Filter, Wire};
use omx_tools::parse_args;
use omx_transport::{interface_by_name, CaptureSocket};

#[derive(Parser)]
#[command(
    name = "omx_dump",
    about = "Print omx frames (EtherType 0x86DF) one line each, live or from a pcap file",
    after_help = "Each line: seconds since the first frame, source MAC > destination MAC, \
the packet type and its fields as key=value (ep=SRC>DST endpoints, seq/ack sequence \
numbers, match info, len message length, frag/flen medium fragment, frame bytes, \
flags=latency,checksum). A bundle's inner frames follow it, indented. Frames that do not \
decode print as `malformed` with the reason (a bad checksum among them). Live capture \
needs CAP_NET_RAW."
)]
struct Args {
    /// Capture on this interface (e.g. omx0).
    #[arg(short = 'i', long, conflicts_with = "read")]
    interface: Option<String>,
    /// Read frames from this pcap file instead (tcpdump -w, omx_dump -w).
    #[arg(short = 'r', long)]
    read: Option<PathBuf>,
    /// Also write the shown frames to this pcap file.
    #[arg(short = 'w', long)]
    write: Option<PathBuf>,
    /// Stop after this many frames shown.
    #[arg(short = 'c', long)]
    count: Option<u64>,
    /// Stop a live capture after this many seconds.
    #[arg(long)]
    seconds: Option<f64>,
    /// Only frames from or to this MAC address (repeatable).
    #[arg(long = "peer", value_parser = parse_mac)]
    peers: Vec<[u8; 6]>,
    /// Only frames from or to this endpoint index (repeatable).
    #[arg(short = 'e', long = "endpoint")]
    endpoints: Vec<u8>,
    /// Only these packet types, comma separated (tiny, small, medium, rndv, pull,
    /// pull_reply, notify, connect, truc, nack_lib, nack_mcp, host_query, host_reply,
    /// raw, bundle, malformed).
    #[arg(short = 't', long = "type", value_delimiter = ',')]
    types: Vec<String>,
    /// Frame layout: native, mx (MX-wire-compatible), or auto (native unless only MX
    /// reads the frame).
    #[arg(long, value_enum, default_value = "auto")]
    wire: Wire,
    /// EtherType of the frames (hex).
    #[arg(long, default_value = "0x86df", value_parser = parse_hex16)]
    ethertype: u16,
    /// Print no lines (with -w: only write the file).
    #[arg(short = 'q', long)]
    quiet: bool,
}

fn parse_hex16(s: &str) -> Result<u16, String> {
    u16::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| format!("{s}: {e}"))
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("omx_dump: {msg}");
    exit(1);
}

/// Shows the frames that pass the filter and writes them; counts what was shown.
struct Sink {
    filter: Filter,
    wire: Wire,
    ethertype: u16,
    quiet: bool,
    out: Option<pcap::PcapWriter<BufWriter<File>>>,
    first: Option<SystemTime>,
    shown: u64,
}

impl Sink {
    fn frame(&mut self, ts: SystemTime, frame: &[u8]) {
        let lines = describe(frame, self.wire, self.ethertype);
        if !lines.iter().any(|l| self.filter.accepts(l)) {
            return;
        }
        let first = *self.first.get_or_insert(ts);
        let secs = ts.duration_since(first).unwrap_or_default().as_secs_f64();
        if !self.quiet {
            let mut stdout = std::io::stdout().lock();
            for l in lines.iter().filter(|l| self.filter.accepts(l)) {
                let _ = writeln!(stdout, "{secs:.6} {}", render(l));
            }
        }
        if let Some(w) = &mut self.out {
            if let Err(e) = w.write(ts, frame) {
                fail(format!("cannot write the pcap file: {e}"));
            }
        }
        self.shown += 1;
    }

    fn flush(&mut self) {
        if let Some(w) = &mut self.out {
            if let Err(e) = w.flush() {
                fail(format!("cannot write the pcap file: {e}"));
            }
        }
    }
}

fn main() {
    let a: Args = parse_args();
    let known = type_names();
    if let Some(t) = a.types.iter().find(|t| !known.contains(&t.as_str())) {
        fail(format!("unknown type {t}; known: {}", known.join(", ")));
    }
    let out = a.write.as_ref().map(|p| {
        let f = File::create(p).unwrap_or_else(|e| fail(format!("{}: {e}", p.display())));
        pcap::PcapWriter::new(BufWriter::new(f))
            .unwrap_or_else(|e| fail(format!("{}: {e}", p.display())))
    });
    let mut sink = Sink {
        filter: Filter {
            peers: a.peers.clone(),
            endpoints: a.endpoints.clone(),
            types: a.types.clone(),
        },
        wire: a.wire,
        ethertype: a.ethertype,
        quiet: a.quiet,
        out,
        first: None,
        shown: 0,
    };
    let done = |s: &Sink| a.count.is_some_and(|c| s.shown >= c);
    if let Some(path) = &a.read {
        let f = File::open(path).unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
        let mut r = pcap::PcapReader::new(BufReader::new(f))
            .unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
        while !done(&sink) {
            match r.next_frame() {
                Ok(Some((ts, frame))) => sink.frame(ts, &frame),
                Ok(None) => break,
                Err(e) => fail(format!("{}: {e}", path.display())),
            }
        }
        sink.flush();
        return;
    }
    let Some(name) = &a.interface else {
        fail("give an interface (-i) or a pcap file (-r)");
    };
    let iface = interface_by_name(name).unwrap_or_else(|e| fail(format!("{name}: {e}")));
    let mut sock = CaptureSocket::open(&iface, a.ethertype).unwrap_or_else(|e| {
        fail(format!(
            "cannot capture on {name} (CAP_NET_RAW needed): {e}"
        ))
    });
    eprintln!(
        "omx_dump: listening on {name} (EtherType {:#06x})",
        a.ethertype
    );
    let deadline = a
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    // The file is flushed whenever the wire is quiet, so a capture ended by a signal
    // loses at most the last 100 ms.
    let tick = Duration::from_millis(100);
    let mut last_flush = Instant::now();
    while !done(&sink) && deadline.is_none_or(|d| Instant::now() < d) {
        match sock.next(tick) {
            Ok(Some((frame, _dir))) => sink.frame(SystemTime::now(), frame),
            Ok(None) => {}
            Err(e) => fail(format!("capture on {name}: {e}")),
        }
        if last_flush.elapsed() >= tick {
            sink.flush();
            last_flush = Instant::now();
        }
    }
    sink.flush();
}
