//! ndkperf's results in perftest's conventions: latency statistics as ib_*_lat prints them,
//! bandwidth rows as ib_*_bw prints them (MB = 2^20 bytes), and the same rows as CSV, JSON or
//! an SVG plot. Only `examples/ndkperf.rs` uses this module.

use std::fmt::Write as _;
use std::path::Path;

/// perftest's MB: 2^20 bytes.
pub const MB: f64 = 1_048_576.0;

/// Latency statistics in µs, as ib_read_lat / ib_write_lat / ib_send_lat report them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatStats {
    pub min: f64,
    pub max: f64,
    /// The median (perftest's "typical").
    pub typical: f64,
    pub avg: f64,
    /// Population standard deviation.
    pub stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

impl LatStats {
    /// Statistics of `samples` (µs, any order); all zero if there are none.
    pub fn of(samples: &[f64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        let avg = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n;
        // perftest indexes the sorted samples at ceil(count * p) - 1.
        let at = |p: f64| {
            let i = ((n * p).ceil() as usize).saturating_sub(1);
            v[i.min(v.len() - 1)]
        };
        Self {
            min: v[0],
            max: v[v.len() - 1],
            typical: v[v.len() / 2],
            avg,
            stdev: var.sqrt(),
            p99: at(0.99),
            p999: at(0.999),
        }
    }
}

/// One bandwidth row (ib_*_bw) with the provider's own figures per work request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwRow {
    pub bytes: u32,
    pub iters: u32,
    /// MB/s (2^20), best tenth of the run.
    pub peak: f64,
    /// MB/s (2^20) over the whole run.
    pub avg: f64,
    /// Millions of messages per second.
    pub mpps: f64,
    pub doorbells: f64,
    /// CQ POLL kicks per request (empty polls of a spinning poller).
    pub poll_doorbells: f64,
    pub interrupts: f64,
    pub dpcs: f64,
    /// Wall-clock ns per request spent inside provider calls: the median post times posts per
    /// request plus the median poll that returned completions times those polls per request,
    /// the timer's own cost and the time the doorbell hook spent in the model subtracted.
    pub provider_ns: f64,
}

/// One latency row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatRow {
    pub bytes: u32,
    pub iters: u32,
    pub stats: LatStats,
    /// The samples, sorted (for the plot).
    pub samples: Vec<f64>,
}

/// Everything one test measured.
#[derive(Clone, Debug, Default)]
pub struct TestResult {
    /// perftest's name: "RDMA_Read", "RDMA_Write", "Send".
    pub name: &'static str,
    /// How latency was measured.
    pub lat_method: &'static str,
    pub lat: Vec<LatRow>,
    pub bw: Vec<BwRow>,
}

pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// ib_*_lat's header and rows.
pub fn print_lat(t: &TestResult) {
    if t.lat.is_empty() {
        return;
    }
    println!("{RULE}");
    println!(
        "                    {} Latency Test ({})",
        t.name, t.lat_method
    );
    println!(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
    );
    for r in &t.lat {
        let s = r.stats;
        println!(
            " {:<6} {:<10}     {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
            r.bytes, r.iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
        );
    }
}

/// ib_*_bw's header and rows, with the provider's exact counts after perftest's columns.
///
/// Only what a reader can take at face value: the average over the whole run, and the
/// doorbells, interrupts and DPCs per request. Not printed here (`--csv` and `--json` keep
/// them, [`BwRow`] says what they are): the peak of one tenth of the run (a simulator's pause
/// or burst, not a NIC's rate), the CQ POLL kicks (an idle poller's spin rate, not the
/// driver's) and the wall time inside provider calls (below the clock's resolution: the
/// provider's cost is what `benches/instructions.sh` counts).
pub fn print_bw(t: &TestResult) {
    if t.bw.is_empty() {
        return;
    }
    println!("{RULE}");
    println!("                    {} BW Test", t.name);
    println!(" {BW_HEADER}");
    for r in &t.bw {
        println!(
            " {:<10} {:<10}       {:<20.2} {:<15.6} {:<8.3} {:<8.3} {:.3}",
            r.bytes, r.iters, r.avg, r.mpps, r.doorbells, r.interrupts, r.dpcs
        );
    }
}

/// The bandwidth table's header (without its leading space).
pub const BW_HEADER: &str =
    "#bytes     #iterations    BW average[MB/sec]   MsgRate[Mpps]   DB/WR    IRQ/WR   DPC/WR";

/// One CSV table: `kind,test,bytes,iters,...` (kind = lat or bw).
pub fn csv(results: &[TestResult]) -> String {
    let mut s = String::from(
        "kind,test,bytes,iters,t_min_us,t_max_us,t_typical_us,t_avg_us,t_stdev_us,t_p99_us,t_p999_us,bw_peak_mib_s,bw_avg_mib_s,msg_rate_mpps,doorbells_per_wr,poll_doorbells_per_wr,interrupts_per_wr,dpcs_per_wr,provider_ns_per_wr\n",
    );
    for t in results {
        for r in &t.lat {
            let x = r.stats;
            let _ = writeln!(
                s,
                "lat,{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},,,,,,,,",
                t.name, r.bytes, r.iters, x.min, x.max, x.typical, x.avg, x.stdev, x.p99, x.p999
            );
        }
        for r in &t.bw {
            let _ = writeln!(
                s,
                "bw,{},{},{},,,,,,,,{:.3},{:.3},{:.6},{:.4},{:.4},{:.4},{:.4},{:.1}",
                t.name,
                r.bytes,
                r.iters,
                r.peak,
                r.avg,
                r.mpps,
                r.doorbells,
                r.poll_doorbells,
                r.interrupts,
                r.dpcs,
                r.provider_ns
            );
        }
    }
    s
}

/// The results as one JSON document; `config` is a list of (key, already-JSON value).
pub fn json(config: &[(&str, String)], results: &[TestResult]) -> String {
    let num = |x: f64| {
        if x.is_finite() {
            format!("{x:.4}")
        } else {
            "null".to_string()
        }
    };
    let mut s = String::from(
        "{\n  \"units\": {\"bandwidth\": \"MiB/s (MB = 2^20 bytes)\", \"latency\": \"us\", \"provider\": \"ns per work request\"},\n  \"config\": {",
    );
    for (i, (k, v)) in config.iter().enumerate() {
        let _ = write!(s, "{}\"{k}\": {v}", if i == 0 { "" } else { ", " });
    }
    s.push_str("},\n  \"tests\": [");
    for (i, t) in results.iter().enumerate() {
        let _ = write!(
            s,
            "{}\n    {{\"test\": \"{}\", \"latency_method\": \"{}\", \"latency\": [",
            if i == 0 { "" } else { "," },
            t.name,
            t.lat_method
        );
        for (j, r) in t.lat.iter().enumerate() {
            let x = r.stats;
            let _ = write!(
                s,
                "{}{{\"bytes\": {}, \"iters\": {}, \"t_min\": {}, \"t_max\": {}, \"t_typical\": {}, \"t_avg\": {}, \"t_stdev\": {}, \"p99\": {}, \"p999\": {}}}",
                if j == 0 { "" } else { ", " },
                r.bytes,
                r.iters,
                num(x.min),
                num(x.max),
                num(x.typical),
                num(x.avg),
                num(x.stdev),
                num(x.p99),
                num(x.p999)
            );
        }
        s.push_str("], \"bandwidth\": [");
        for (j, r) in t.bw.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"bytes\": {}, \"iters\": {}, \"bw_peak\": {}, \"bw_avg\": {}, \"msg_rate_mpps\": {}, \"doorbells_per_wr\": {}, \"poll_doorbells_per_wr\": {}, \"interrupts_per_wr\": {}, \"dpcs_per_wr\": {}, \"provider_ns_per_wr\": {}}}",
                if j == 0 { "" } else { ", " },
                r.bytes,
                r.iters,
                num(r.peak),
                num(r.avg),
                num(r.mpps),
                num(r.doorbells),
                num(r.poll_doorbells),
                num(r.interrupts),
                num(r.dpcs),
                num(r.provider_ns)
            );
        }
        s.push_str("]}");
    }
    s.push_str("\n  ]\n}\n");
    s
}

/// A JSON string literal.
pub fn json_str(v: &str) -> String {
    let mut s = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// Draws bandwidth against message size (left) and each latency run's distribution as a
/// cumulative curve (right) into an SVG file.
pub fn plot(path: &Path, results: &[TestResult]) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let root = SVGBackend::new(path, (1280, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(640);
    let palette = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];

    let sizes: Vec<u32> = results
        .iter()
        .flat_map(|t| t.bw.iter().map(|r| r.bytes))
        .collect();
    let (lo, hi) = (
        sizes.iter().copied().min().unwrap_or(1).max(1),
        sizes.iter().copied().max().unwrap_or(2).max(2),
    );
    let x_range = (f64::from(lo).log2().floor())..(f64::from(hi).log2().ceil() + 0.01);
    let top = results
        .iter()
        .flat_map(|t| t.bw.iter().map(|r| r.avg.max(r.peak)))
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut bw = ChartBuilder::on(&left)
        .caption("Bandwidth vs message size", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range, 0.0..top)
        .map_err(|e| err(&e))?;
    bw.configure_mesh()
        .x_desc("message size [bytes] (log2)")
        .y_desc("BW average [MB/s, MB = 2^20]")
        .x_label_formatter(&|x| format!("{}", 2f64.powf(*x).round()))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, t) in results.iter().enumerate().filter(|(_, t)| !t.bw.is_empty()) {
        let color = palette[i % palette.len()];
        let points: Vec<(f64, f64)> =
            t.bw.iter()
                .map(|r| (f64::from(r.bytes.max(1)).log2(), r.avg))
                .collect();
        bw.draw_series(LineSeries::new(points, color))
            .map_err(|e| err(&e))?
            .label(t.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    bw.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| err(&e))?;

    let lat_max = results
        .iter()
        .flat_map(|t| t.lat.iter().map(|r| r.stats.p999))
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut lat = ChartBuilder::on(&right)
        .caption(
            "Latency distribution (to the 99.9th percentile)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..lat_max, 0.0..1.0)
        .map_err(|e| err(&e))?;
    lat.configure_mesh()
        .x_desc("latency [us]")
        .y_desc("fraction of samples")
        .draw()
        .map_err(|e| err(&e))?;
    let mut k = 0;
    for t in results {
        for r in &t.lat {
            let color = palette[k % palette.len()];
            let style = if (k / palette.len()).is_multiple_of(2) {
                color.stroke_width(2)
            } else {
                color.stroke_width(1)
            };
            k += 1;
            let n = r.samples.len().max(1) as f64;
            let points: Vec<(f64, f64)> = r
                .samples
                .iter()
                .enumerate()
                .map(|(i, &x)| (x.min(lat_max), (i + 1) as f64 / n))
                .collect();
            lat.draw_series(LineSeries::new(points, style))
                .map_err(|e| err(&e))?
                .label(format!("{} {} B", t.name, r.bytes))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
    }
    lat.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
