//! Closed days of one-minute roll-ups, packed (issue 16): one row per series and UTC day instead
//! of one per minute, so that months of a fleet's history stay small and a page over them reads
//! a row per day (`migrations/sqlite/0011_packed_days.sql` says what a packed row holds).
//!
//! - The format: `minutes` is a version byte then the minute offsets within the day (0..1440,
//!   rising), each as the LEB128 of its distance from the previous one; every value column holds
//!   one value per listed minute, each the LEB128 of 0 for NULL, else of 1 + the zigzag of its
//!   difference from the column's previous non-NULL value (from 0). A value that repeats is one
//!   byte. Values are exact: a packed day answers every query as its one-minute rows did.
//! - [`Packer`] groups sorted one-minute rows into series-days and [`merge`] folds a late
//!   minute into a packed day with the roll-up's own rules (sum of counts, min of minima, max of
//!   maxima, count-weighted means, first value of the rest); both are pure.
//! - [`pack_days`] (called by the roll-up's `Live::pack_closed_days`, under its lock, one
//!   transaction per table) packs every one-minute row of a day that has ended before a time,
//!   merges with a packed row already there (late samples), and deletes the rows it packed, in
//!   the caller's transaction.
//! - [`bucket_maxima`] reads a packed day back into a window's buckets (`queries`).

use std::collections::{BTreeSet, HashMap};

use super::series::Window;
use crate::db::{Conn, RowSteps, Tx};
use crate::with_tx;

/// A day in milliseconds (UTC days: the same days as PostgreSQL's partitions).
pub const DAY_MS: i64 = 86_400_000;
const MINUTE_MS: i64 = 60_000;
const MINUTES_PER_DAY: i64 = DAY_MS / MINUTE_MS;
/// The first byte of `minutes`: this file's format.
const FORMAT: u8 = 1;

/// A packed column that cannot be read back (written by a newer server, or damaged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a packed day of one-minute roll-ups is unreadable: {0}")]
pub struct Corrupt(&'static str);

impl From<Corrupt> for sqlx::Error {
    fn from(e: Corrupt) -> Self {
        sqlx::Error::Decode(Box::new(e))
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(bytes: &[u8], at: &mut usize) -> Result<u128, Corrupt> {
    let mut v = 0u128;
    for shift in (0..).step_by(7).take(19) {
        let b = *bytes.get(*at).ok_or(Corrupt("a column ends early"))?;
        *at += 1;
        v |= u128::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(Corrupt("a value is longer than any the format writes"))
}

/// Minute offsets within a day (rising, below 1440), packed.
pub fn pack_minutes(offsets: &[i64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(offsets.len() + 1);
    out.push(FORMAT);
    let mut prev = -1;
    for &m in offsets {
        debug_assert!(m > prev && m < MINUTES_PER_DAY, "minutes rise within a day");
        put_varint(&mut out, (m - prev) as u128);
        prev = m;
    }
    out
}

pub fn unpack_minutes(bytes: &[u8]) -> Result<Vec<i64>, Corrupt> {
    match bytes.first() {
        Some(&FORMAT) => {}
        Some(_) => return Err(Corrupt("written in a format this server does not know")),
        None => return Err(Corrupt("its minutes are empty")),
    }
    let (mut at, mut prev, mut out) = (1, -1i64, Vec::with_capacity(bytes.len()));
    while at < bytes.len() {
        let step = get_varint(bytes, &mut at)?;
        if step == 0 || step > (MINUTES_PER_DAY - 1 - prev) as u128 {
            return Err(Corrupt("a minute is out of its day or out of order"));
        }
        prev += step as i64;
        out.push(prev);
    }
    Ok(out)
}

/// One column's values, packed (see the module doc).
pub fn pack_values(values: impl IntoIterator<Item = Option<i64>>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut prev = 0i64;
    for v in values {
        match v {
            None => out.push(0),
            Some(v) => {
                let d = v.wrapping_sub(prev);
                put_varint(&mut out, u128::from(((d << 1) ^ (d >> 63)) as u64) + 1);
                prev = v;
            }
        }
    }
    out
}

/// `n` values of a column packed by [`pack_values`].
pub fn unpack_values(bytes: &[u8], n: usize) -> Result<Vec<Option<i64>>, Corrupt> {
    let (mut at, mut prev, mut out) = (0, 0i64, Vec::with_capacity(n));
    for _ in 0..n {
        match get_varint(bytes, &mut at)? {
            0 => out.push(None),
            u => {
                let z = u64::try_from(u - 1).map_err(|_| Corrupt("a value is out of range"))?;
                prev = prev.wrapping_add(((z >> 1) as i64) ^ -((z & 1) as i64));
                out.push(Some(prev));
            }
        }
    }
    if at != bytes.len() {
        return Err(Corrupt(
            "a column holds more values than its day has minutes",
        ));
    }
    Ok(out)
}

/// A bucket and the maximum of each column there.
pub type BucketMaxima = (i64, Vec<Option<i64>>);

/// For each bucket of `w` that a packed day's minutes within the window fall in: the bucket and
/// the maximum of each column there (what the pages take from one-minute rows: `max` per
/// bucket, NULLs aside).
pub fn bucket_maxima(
    w: &Window,
    day_ms: i64,
    minutes: &[u8],
    columns: &[&[u8]],
) -> Result<Vec<BucketMaxima>, Corrupt> {
    let minutes = unpack_minutes(minutes)?;
    let columns = columns
        .iter()
        .map(|c| unpack_values(c, minutes.len()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out: Vec<BucketMaxima> = Vec::new();
    for (i, m) in minutes.iter().enumerate() {
        let t = day_ms + m * MINUTE_MS;
        if t < w.from_ms || t > w.to_ms {
            continue;
        }
        let b = (t - w.from_ms) / w.bucket_ms;
        if out.last().is_none_or(|l| l.0 != b) {
            out.push((b, vec![None; columns.len()]));
        }
        let slot = &mut out.last_mut().expect("pushed above").1;
        for (s, c) in slot.iter_mut().zip(&columns) {
            *s = (*s).max(c[i]);
        }
    }
    Ok(out)
}

/// How a late minute's value and the packed one combine: the roll-up's `ON CONFLICT` rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Sample counts (`n`): added.
    Sum,
    Min,
    Max,
    /// A mean over `n` samples (the table's first column): weighted by the counts.
    Mean,
    /// The first value stays (the roll-up does not update these on a late sample).
    Keep,
}

/// A key column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Text,
    Int,
}

/// A one-minute table and its packed form.
#[derive(Debug)]
pub struct Table {
    pub rolled: &'static str,
    pub packed: &'static str,
    /// The series' key columns (and whether each may be NULL).
    pub key: &'static [(&'static str, KeyType, bool)],
    /// A text column kept once per day, the day's largest value (the process name).
    pub attr: Option<&'static str>,
    /// The value columns; the first is `n`, the samples each minute folds.
    pub fields: &'static [(&'static str, Merge)],
}

pub const GPU: Table = Table {
    rolled: "gpu_samples_1m",
    packed: "gpu_samples_1m_packed",
    key: &[("gpu_uuid", KeyType::Text, false)],
    attr: None,
    fields: &[
        ("n", Merge::Sum),
        ("used_min_bytes", Merge::Min),
        ("used_max_bytes", Merge::Max),
        ("used_mean_bytes", Merge::Mean),
        ("reserved_bytes", Merge::Keep),
        ("gpu_util_mean", Merge::Keep),
        ("temperature_max_c", Merge::Max),
        ("power_mean_mw", Merge::Keep),
    ],
};

pub const PROCESS: Table = Table {
    rolled: "process_samples_1m",
    packed: "process_samples_1m_packed",
    key: &[
        ("host", KeyType::Text, false),
        ("gpu_uuid", KeyType::Text, false),
        ("pid", KeyType::Int, false),
        ("start_time_ms", KeyType::Int, true),
    ],
    attr: Some("name"),
    fields: &[
        ("n", Merge::Sum),
        ("used_min_bytes", Merge::Min),
        ("used_max_bytes", Merge::Max),
        ("used_mean_bytes", Merge::Mean),
    ],
};

pub const ALLOCATOR: Table = Table {
    rolled: "allocator_samples_1m",
    packed: "allocator_samples_1m_packed",
    key: &[
        ("host", KeyType::Text, false),
        ("pid", KeyType::Int, false),
        ("start_time_ms", KeyType::Int, true),
        ("device", KeyType::Int, false),
        ("gpu_uuid", KeyType::Text, true),
    ],
    attr: None,
    fields: &[
        ("n", Merge::Sum),
        ("last_step", Merge::Max),
        ("allocated_min_bytes", Merge::Min),
        ("allocated_max_bytes", Merge::Max),
        ("allocated_mean_bytes", Merge::Mean),
        ("reserved_max_bytes", Merge::Max),
        ("reserved_mean_bytes", Merge::Mean),
        ("inactive_split_max_bytes", Merge::Max),
        ("alloc_retries", Merge::Max),
        ("ooms", Merge::Max),
    ],
};

pub const TABLES: [&Table; 3] = [&GPU, &PROCESS, &ALLOCATOR];

/// One key column's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyValue {
    Text(Option<String>),
    Int(Option<i64>),
}

/// One series' minutes of one day, unpacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesDay {
    pub key: Vec<KeyValue>,
    pub day_ms: i64,
    pub attr: Option<String>,
    /// Minute offsets within the day, rising.
    pub minutes: Vec<i64>,
    /// One vector per field of the table, as long as `minutes`.
    pub columns: Vec<Vec<Option<i64>>>,
}

impl SeriesDay {
    fn new(key: Vec<KeyValue>, day_ms: i64, fields: usize) -> SeriesDay {
        SeriesDay {
            key,
            day_ms,
            attr: None,
            minutes: Vec::new(),
            columns: vec![Vec::new(); fields],
        }
    }

    /// The packed columns: `minutes`, then one per field.
    pub fn pack(&self) -> (Vec<u8>, Vec<Vec<u8>>) {
        (
            pack_minutes(&self.minutes),
            self.columns
                .iter()
                .map(|c| pack_values(c.iter().copied()))
                .collect(),
        )
    }

    pub fn unpack(
        key: Vec<KeyValue>,
        day_ms: i64,
        attr: Option<String>,
        minutes: &[u8],
        columns: &[Vec<u8>],
    ) -> Result<SeriesDay, Corrupt> {
        let minutes = unpack_minutes(minutes)?;
        let columns = columns
            .iter()
            .map(|c| unpack_values(c, minutes.len()))
            .collect::<Result<_, _>>()?;
        Ok(SeriesDay {
            key,
            day_ms,
            attr,
            minutes,
            columns,
        })
    }
}

/// Groups one-minute rows, sorted by series key then minute, into series-days.
#[derive(Debug)]
pub struct Packer<'a> {
    table: &'a Table,
    current: Option<SeriesDay>,
    /// Series-days complete (the rows moved on to another series or day).
    pub done: Vec<SeriesDay>,
}

impl<'a> Packer<'a> {
    pub fn new(table: &'a Table) -> Packer<'a> {
        Packer {
            table,
            current: None,
            done: Vec::new(),
        }
    }

    /// Adds one one-minute row. Rows of a series-day arrive together, minutes rising; a repeated
    /// minute is merged (`merge` rules), which the roll-up's unique key rules out anyway.
    pub fn push(
        &mut self,
        key: Vec<KeyValue>,
        attr: Option<String>,
        minute_ms: i64,
        values: Vec<Option<i64>>,
    ) {
        let day_ms = minute_ms.div_euclid(DAY_MS) * DAY_MS;
        let offset = (minute_ms - day_ms) / MINUTE_MS;
        let same = self
            .current
            .as_ref()
            .is_some_and(|c| c.day_ms == day_ms && c.key == key);
        if !same {
            self.done.extend(self.current.take());
            self.current = Some(SeriesDay::new(key, day_ms, self.table.fields.len()));
        }
        let s = self.current.as_mut().expect("set above");
        s.attr = s.attr.take().max(attr);
        if s.minutes.last().is_some_and(|&m| m >= offset) {
            let mut one = SeriesDay::new(s.key.clone(), day_ms, self.table.fields.len());
            one.minutes.push(offset);
            for (c, v) in one.columns.iter_mut().zip(values) {
                c.push(v);
            }
            merge(self.table, s, one);
            return;
        }
        s.minutes.push(offset);
        for (c, v) in s.columns.iter_mut().zip(values) {
            c.push(v);
        }
    }

    /// Ends the last series-day.
    pub fn finish(&mut self) {
        self.done.extend(self.current.take());
    }
}

/// Folds `late` (minutes of the same series-day) into `into`, minute by minute; where both have a
/// minute, each field combines by its [`Merge`] rule with `into`'s value as the first.
pub fn merge(table: &Table, into: &mut SeriesDay, late: SeriesDay) {
    let n = table.fields.len();
    let mut out = SeriesDay::new(std::mem::take(&mut into.key), into.day_ms, n);
    out.attr = into.attr.take().max(late.attr.clone());
    let (mut i, mut j) = (0, 0);
    let (a, b) = (&*into, &late);
    while i < a.minutes.len() || j < b.minutes.len() {
        let take_a = j == b.minutes.len() || (i < a.minutes.len() && a.minutes[i] <= b.minutes[j]);
        let take_b = i == a.minutes.len() || (j < b.minutes.len() && b.minutes[j] <= a.minutes[i]);
        if take_a && take_b {
            out.minutes.push(a.minutes[i]);
            let (na, nb) = (a.columns[0][i], b.columns[0][j]);
            for (f, (_, rule)) in table.fields.iter().enumerate() {
                let (x, y) = (a.columns[f][i], b.columns[f][j]);
                let v = match rule {
                    Merge::Sum => x.zip(y).map(|(x, y)| x + y),
                    Merge::Min => match (x, y) {
                        (Some(x), Some(y)) => Some(x.min(y)),
                        (x, y) => x.or(y),
                    },
                    Merge::Max => x.max(y),
                    Merge::Mean => match (x, y, na, nb) {
                        (Some(x), Some(y), Some(na), Some(nb)) if na + nb > 0 => {
                            Some((x * na + y * nb) / (na + nb))
                        }
                        _ => None,
                    },
                    Merge::Keep => x,
                };
                out.columns[f].push(v);
            }
            (i, j) = (i + 1, j + 1);
        } else if take_a {
            out.minutes.push(a.minutes[i]);
            for f in 0..n {
                out.columns[f].push(a.columns[f][i]);
            }
            i += 1;
        } else {
            out.minutes.push(b.minutes[j]);
            for f in 0..n {
                out.columns[f].push(b.columns[f][j]);
            }
            j += 1;
        }
    }
    *into = out;
}

/// The SQL a table's packing needs, built once per call from its description.
struct Statements {
    /// The one-minute rows older than $1, sorted by series and minute.
    rows: String,
    /// Whether day $1 has packed rows.
    any_packed: String,
    /// A series-day's packed row: key columns $1.., day last.
    find: String,
    delete: String,
    insert: String,
}

impl Table {
    fn statements(&self) -> Statements {
        let key: Vec<&str> = self.key.iter().map(|k| k.0).collect();
        let fields: Vec<&str> = self.fields.iter().map(|f| f.0).collect();
        let attr: Vec<&str> = self.attr.into_iter().collect();
        let select: Vec<&str> = [&key[..], &attr[..], &["minute_ms"], &fields[..]].concat();
        let matches: Vec<String> = self
            .key
            .iter()
            .enumerate()
            .map(|(i, (c, _, nullable))| {
                let op = if *nullable {
                    "IS NOT DISTINCT FROM"
                } else {
                    "="
                };
                format!("{c} {op} ${}", i + 1)
            })
            .chain([format!("day_ms = ${}", self.key.len() + 1)])
            .collect();
        let packed: Vec<&str> = [&key[..], &attr[..], &["day_ms", "minutes"], &fields[..]].concat();
        let placeholders: Vec<String> = (1..=packed.len()).map(|i| format!("${i}")).collect();
        Statements {
            rows: format!(
                "SELECT {} FROM {} WHERE minute_ms < $1 ORDER BY {}, minute_ms",
                select.join(", "),
                self.rolled,
                key.join(", ")
            ),
            any_packed: format!(
                "SELECT count(*) FROM (SELECT 1 FROM {} WHERE day_ms = $1 LIMIT 1) AS p",
                self.packed
            ),
            find: format!(
                "SELECT {} FROM {} WHERE {}",
                [&attr[..], &["minutes"], &fields[..]].concat().join(", "),
                self.packed,
                matches.join(" AND ")
            ),
            delete: format!(
                "DELETE FROM {} WHERE {}",
                self.packed,
                matches.join(" AND ")
            ),
            insert: format!(
                "INSERT INTO {} ({}) VALUES ({})",
                self.packed,
                packed.join(", "),
                placeholders.join(", ")
            ),
        }
    }
}

/// What packing did to one table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Packed {
    /// One-minute rows packed (and deleted).
    pub rows: u64,
    /// Packed rows written (series-days).
    pub series_days: u64,
}

/// Packs every one-minute row of `table` of a day that ends at or before `before_ms` (a day's
/// start) into its series-day, and retires the rows read (`Conn::retire_rolled_days`), in the
/// caller's transaction. Rows are read in steps (`Conn::next_rows`), and each step's finished
/// days written before the next is read.
pub async fn pack_days(tx: &mut Tx, table: &Table, before_ms: i64) -> sqlx::Result<Packed> {
    let st = table.statements();
    let mut packer = Packer::new(table);
    let mut steps = RowSteps::new(st.rows.clone(), before_ms);
    let (mut rows_read, mut series_days) = (0u64, 0u64);
    let mut has_packed = HashMap::new();
    let mut days = BTreeSet::new();
    loop {
        let read = read_step(tx, table, &mut steps, &mut packer).await?;
        rows_read += read;
        if read == 0 {
            packer.finish();
        }
        days.extend(packer.done.iter().map(|d| d.day_ms));
        let done: Vec<SeriesDay> = packer.done.drain(..).collect();
        series_days += write_days(tx, table, &st, done, &mut has_packed).await?;
        if read == 0 {
            break;
        }
    }
    with_tx!(tx, |c| c
        .retire_rolled_days(table.rolled, &days, before_ms)
        .await)?;
    Ok(Packed {
        rows: rows_read,
        series_days,
    })
}

/// Reads the next step of the closed days' one-minute rows (`Statements::rows`' columns) into
/// the packer: the rows read, 0 when all were.
async fn read_step(
    tx: &mut Tx,
    table: &Table,
    steps: &mut RowSteps,
    packer: &mut Packer<'_>,
) -> sqlx::Result<u64> {
    with_tx!(tx, |c| {
        use sqlx::Row;
        let rows = c.next_rows(steps).await?;
        let read = rows.len() as u64;
        for row in rows {
            let mut at = 0usize;
            let mut key = Vec::with_capacity(table.key.len());
            for (_, ty, _) in table.key {
                key.push(match ty {
                    KeyType::Text => KeyValue::Text(row.try_get::<Option<String>, _>(at)?),
                    KeyType::Int => KeyValue::Int(row.try_get::<Option<i64>, _>(at)?),
                });
                at += 1;
            }
            let attr = match table.attr {
                Some(_) => {
                    at += 1;
                    row.try_get::<Option<String>, _>(at - 1)?
                }
                None => None,
            };
            let minute_ms: i64 = row.try_get(at)?;
            let values = (0..table.fields.len())
                .map(|f| row.try_get::<Option<i64>, _>(at + 1 + f))
                .collect::<Result<Vec<_>, _>>()?;
            packer.push(key, attr, minute_ms, values);
        }
        Ok(read)
    })
}

/// Binds a series' key values to `q`, in order.
fn bind_key<'q, DB: sqlx::Database>(
    mut q: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    key: &[KeyValue],
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    for<'t> Option<String>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> Option<i64>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    for k in key {
        q = match k {
            KeyValue::Text(v) => q.bind(v.clone()),
            KeyValue::Int(v) => q.bind(*v),
        };
    }
    q
}

/// Writes finished series-days, merging each into a packed row already there (late samples for
/// a day packed before): the rows written.
async fn write_days(
    tx: &mut Tx,
    table: &Table,
    st: &Statements,
    days: Vec<SeriesDay>,
    has_packed: &mut HashMap<i64, bool>,
) -> sqlx::Result<u64> {
    with_tx!(tx, |c| {
        use sqlx::Row;
        let mut written = 0u64;
        for mut day in days {
            let known = match has_packed.get(&day.day_ms) {
                Some(&k) => k,
                None => {
                    let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(st.any_packed.clone()))
                        .bind(day.day_ms)
                        .fetch_one(&mut *c)
                        .await?;
                    has_packed.insert(day.day_ms, n > 0);
                    n > 0
                }
            };
            if known {
                let old = bind_key(sqlx::query(sqlx::AssertSqlSafe(st.find.clone())), &day.key)
                    .bind(day.day_ms)
                    .fetch_optional(&mut *c)
                    .await?;
                if let Some(old) = old {
                    let skip = usize::from(table.attr.is_some());
                    let attr = match table.attr {
                        Some(_) => old.try_get::<Option<String>, _>(0)?,
                        None => None,
                    };
                    let minutes: Vec<u8> = old.try_get(skip)?;
                    let columns = (0..table.fields.len())
                        .map(|f| old.try_get::<Vec<u8>, _>(skip + 1 + f))
                        .collect::<Result<Vec<_>, _>>()?;
                    let mut packed =
                        SeriesDay::unpack(day.key.clone(), day.day_ms, attr, &minutes, &columns)?;
                    merge(table, &mut packed, day);
                    day = packed;
                    bind_key(
                        sqlx::query(sqlx::AssertSqlSafe(st.delete.clone())),
                        &day.key,
                    )
                    .bind(day.day_ms)
                    .execute(&mut *c)
                    .await?;
                }
            }
            let (minutes, columns) = day.pack();
            let mut q = bind_key(
                sqlx::query(sqlx::AssertSqlSafe(st.insert.clone())),
                &day.key,
            );
            if table.attr.is_some() {
                q = q.bind(day.attr.clone());
            }
            q = q.bind(day.day_ms).bind(minutes);
            for col in columns {
                q = q.bind(col);
            }
            q.execute(&mut *c).await?;
            written += 1;
        }
        Ok(written)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_round_trip_exactly_and_damage_is_refused() {
        let minutes = vec![0, 1, 2, 700, 1439];
        let packed = pack_minutes(&minutes);
        assert_eq!(unpack_minutes(&packed).unwrap(), minutes);
        let values = vec![
            Some(0),
            None,
            Some(i64::MAX),
            Some(i64::MIN),
            Some(-5),
            Some(80 << 30),
            Some(80 << 30),
            None,
        ];
        let p = pack_values(values.clone());
        assert_eq!(unpack_values(&p, values.len()).unwrap(), values);
        // A value that repeats is one byte.
        assert_eq!(pack_values(vec![Some(7); 1000]).len(), 1 + 999);
        assert_eq!(pack_values(vec![None; 3]), vec![0, 0, 0]);

        assert!(
            unpack_values(&p, values.len() + 1).is_err(),
            "too few values"
        );
        assert!(unpack_values(&p, values.len() - 1).is_err(), "too many");
        assert!(unpack_values(&[0xff; 30], 1).is_err(), "an endless varint");
        assert!(unpack_minutes(&[]).is_err());
        assert!(unpack_minutes(&[9, 1]).is_err(), "unknown format");
        assert!(unpack_minutes(&[FORMAT, 0]).is_err(), "a minute twice");
        assert_eq!(unpack_minutes(&[FORMAT, 0xa0, 0x0b]).unwrap(), [1439]);
        assert!(
            unpack_minutes(&[FORMAT, 0xa1, 0x0b]).is_err(),
            "minute 1440"
        );
    }

    fn day(minutes: &[i64], cols: &[&[Option<i64>]]) -> SeriesDay {
        SeriesDay {
            key: vec![KeyValue::Text(Some("GPU-1".into()))],
            day_ms: 0,
            attr: None,
            minutes: minutes.to_vec(),
            columns: cols.iter().map(|c| c.to_vec()).collect(),
        }
    }

    #[test]
    fn a_late_minute_merges_by_the_roll_ups_rules() {
        // n, used_min, used_max, used_mean, reserved, util, temperature, power.
        let mut packed = day(
            &[1, 3],
            &[
                &[Some(60), Some(60)],
                &[Some(10), Some(10)],
                &[Some(20), Some(20)],
                &[Some(15), Some(15)],
                &[Some(5), Some(5)],
                &[Some(90), Some(90)],
                &[Some(60), Some(60)],
                &[None, Some(1)],
            ],
        );
        let late = day(
            &[2, 3],
            &[
                &[Some(1), Some(20)],
                &[Some(4), Some(2)],
                &[Some(4), Some(30)],
                &[Some(4), Some(35)],
                &[Some(9), Some(9)],
                &[Some(50), Some(50)],
                &[Some(70), None],
                &[Some(3), Some(3)],
            ],
        );
        merge(&GPU, &mut packed, late);
        assert_eq!(packed.minutes, vec![1, 2, 3]);
        let at3: Vec<Option<i64>> = packed.columns.iter().map(|c| c[2]).collect();
        assert_eq!(
            at3,
            vec![
                Some(80),
                Some(2),
                Some(30),
                Some((15 * 60 + 35 * 20) / 80),
                Some(5),
                Some(90),
                Some(60),
                Some(1)
            ]
        );
        // A minute only the late rows have comes as it is.
        assert_eq!(packed.columns[0][1], Some(1));
        assert_eq!(packed.columns[7][0], None);
    }

    #[test]
    fn the_packer_cuts_series_and_days() {
        let mut p = Packer::new(&GPU);
        let key = |s: &str| vec![KeyValue::Text(Some(s.into()))];
        let v = |x: i64| vec![Some(x); GPU.fields.len()];
        p.push(key("a"), None, DAY_MS - MINUTE_MS, v(1));
        p.push(key("a"), None, DAY_MS, v(2));
        p.push(key("a"), None, DAY_MS + 5 * MINUTE_MS, v(3));
        p.push(key("b"), None, DAY_MS + 5 * MINUTE_MS, v(4));
        p.finish();
        let got: Vec<(i64, Vec<i64>)> = p
            .done
            .iter()
            .map(|d| (d.day_ms, d.minutes.clone()))
            .collect();
        assert_eq!(
            got,
            vec![(0, vec![1439]), (DAY_MS, vec![0, 5]), (DAY_MS, vec![5])]
        );
        let w = Window::new(DAY_MS, DAY_MS + 10 * MINUTE_MS, 2);
        let d = &p.done[1];
        let (m, c) = d.pack();
        let cols: Vec<&[u8]> = c.iter().map(|c| &c[..]).collect();
        let b = bucket_maxima(&w, d.day_ms, &m, &cols[2..3]).unwrap();
        assert_eq!(w.bucket_ms, 60_000);
        assert_eq!(b, vec![(0, vec![Some(2)]), (5, vec![Some(3)])]);
    }
}
