//! A `fdprof_recording` [`Trace`] from what the collector drained of the trace ring and read
//! of the tables at attach: the format's types stay free of the collector's.

use std::collections::HashMap;

use fdprof_common::trace::{TraceRecord, op};
use fdprof_recording::trace::codec::{self, Row};
use fdprof_recording::trace::{
    ENCODING, SYSCALL_TRACE_NOTE, TableSnapshot, Trace, TraceTable, kernel_table_size, runs,
};

use crate::collect::trace::{Drained, ProcTable};

/// The trace of `drained`, starting from `tables`, on a clock starting at `origin_ns`
/// (CLOCK_MONOTONIC) or at the first operation if earlier.
pub fn build(
    drained: &Drained,
    tables: &[ProcTable],
    origin_ns: u64,
    limit: u64,
    lost: u64,
    raw_addrs: bool,
) -> Trace {
    let origin_ns = drained
        .records
        .iter()
        .flat_map(|r| [r.enter_ns, r.exit_ns])
        .filter(|&t| t != 0)
        .fold(origin_ns, u64::min);
    let rel = |t: u64| t.saturating_sub(origin_ns);
    let mut index: HashMap<u64, u32> = HashMap::new();
    let mut list: Vec<TraceTable> = Vec::new();
    let mut id_of = |addr: u64, pid: u32, list: &mut Vec<TraceTable>| -> u32 {
        *index.entry(addr).or_insert_with(|| {
            list.push(TraceTable {
                pid,
                addr: raw_addrs.then_some(addr),
            });
            list.len() as u32 - 1
        })
    };
    let rows: Vec<Row> = drained
        .records
        .iter()
        .map(|r| {
            let mut row = row(r, id_of(r.table, r.pid, &mut list), rel);
            // A fork names its child's table, a new one the child's pid first used.
            if r.op == op::FORK {
                row.arg = id_of(r.child_table, r.fd as u32, &mut list);
            }
            row
        })
        .collect();
    let snapshots = tables
        .iter()
        .map(|t| {
            // The table of the snapshot's process: the first one its threads used.
            let table = match rows
                .iter()
                .position(|r| list[r.table as usize].pid == t.pid)
            {
                Some(i) => rows[i].table,
                None => {
                    list.push(TraceTable {
                        pid: t.pid,
                        addr: None,
                    });
                    list.len() as u32 - 1
                }
            };
            let seen_max = rows
                .iter()
                .find(|r| r.table == table && r.max_fds != 0)
                .map(|r| r.max_fds);
            snapshot(t, table, seen_max, rel)
        })
        .collect();
    Trace {
        encoding: ENCODING.into(),
        events: rows.len() as u64,
        limit,
        over_limit: drained.over_limit,
        lost,
        tables: list,
        snapshots,
        notes: vec![SYSCALL_TRACE_NOTE.into()],
        data: codec::encode(&rows),
    }
}

fn row(r: &TraceRecord, table: u32, rel: impl Fn(u64) -> u64) -> Row {
    let exit_ns = rel(r.exit_ns);
    Row {
        exit_ns,
        enter_ns: if r.enter_ns == 0 {
            exit_ns
        } else {
            rel(r.enter_ns).min(exit_ns)
        },
        tid: r.tid,
        table,
        op: r.op,
        flags: r.flags,
        syscall: r.syscall,
        fd: r.fd,
        arg: r.arg,
        next_fd: r.next_fd,
        max_fds: if r.op == op::EXPAND { 0 } else { r.max_fds },
    }
}

fn snapshot(
    t: &ProcTable,
    table: u32,
    seen_max: Option<u32>,
    rel: impl Fn(u64) -> u64,
) -> TableSnapshot {
    let open: Vec<u32> = t.fds.iter().map(|&(fd, _)| fd).collect();
    let cloexec: Vec<u32> = t.fds.iter().filter(|f| f.1).map(|&(fd, _)| fd).collect();
    let next_fd = (0..)
        .zip(&open)
        .find(|(i, fd)| i != *fd)
        .map_or(open.len() as u32, |(i, _)| i);
    let highest = open.last().copied().unwrap_or(0);
    TableSnapshot {
        table,
        from_ns: rel(t.read_from_ns),
        until_ns: rel(t.read_until_ns),
        open: runs(&open),
        cloexec: runs(&cloexec),
        next_fd,
        max_fds: seen_max.unwrap_or_else(|| kernel_table_size(highest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE_ADDR: u64 = 0xffff_8880_0000_1000;

    /// Two allocations by pid 42 (fds 3 and 4), its table read with fds 0-2 open.
    fn two_allocations(raw_addrs: bool) -> Trace {
        let rec = |fd: i32, exit_ns: u64| TraceRecord {
            enter_ns: exit_ns - 10,
            exit_ns,
            table: TABLE_ADDR,
            pid: 42,
            tid: 42,
            fd,
            op: op::ALLOC,
            next_fd: 3,
            max_fds: 64,
            ..TraceRecord::default()
        };
        let drained = Drained {
            records: vec![rec(3, 1_000), rec(4, 2_000)],
            ..Drained::default()
        };
        let table = ProcTable {
            pid: 42,
            fds: vec![(0, false), (1, false), (2, false)],
            read_from_ns: 500,
            read_until_ns: 600,
        };
        build(&drained, &[table], 0, 100, 0, raw_addrs)
    }

    #[test]
    fn builds_the_rows_and_the_snapshot_of_two_allocations() {
        let row = |fd: i32, exit_ns: u64| Row {
            exit_ns,
            enter_ns: exit_ns - 10,
            tid: 42,
            table: 0,
            op: op::ALLOC,
            fd,
            next_fd: 3,
            max_fds: 64,
            ..Row::default()
        };
        let rows = [row(3, 1_000), row(4, 2_000)];
        let want = Trace {
            encoding: ENCODING.into(),
            events: 2,
            limit: 100,
            over_limit: 0,
            lost: 0,
            tables: vec![TraceTable {
                pid: 42,
                addr: None,
            }],
            snapshots: vec![TableSnapshot {
                table: 0,
                from_ns: 500,
                until_ns: 600,
                open: vec![[0, 3]],
                cloexec: Vec::new(),
                next_fd: 3,
                max_fds: 64,
            }],
            notes: vec![SYSCALL_TRACE_NOTE.into()],
            data: codec::encode(&rows),
        };
        assert_eq!(two_allocations(false), want);
    }

    /// Kernel addresses reveal the KASLR offset: they leave the machine only with --raw-addrs
    /// (without it, the test above).
    #[test]
    fn table_addresses_with_raw_addrs() {
        let tables = two_allocations(true).tables;
        assert_eq!(
            tables.iter().map(|t| t.addr).collect::<Vec<_>>(),
            [Some(TABLE_ADDR)]
        );
    }
}
