//! The lock page's timeline of the last hour (or 15, 5, 1 minutes; by default the shortest
//! that shows what happened): an SVG drawn by
//! `templates/timeline.html` from the numbers computed here (no script, and every text still
//! escaped by the template). Holds are bars with their fencing token, waits are pale bars,
//! expiries, force releases and reentries are marks.

use std::collections::BTreeMap;

use crate::locks::{EventKind, LockEvent, Timestamp, WaiterView};

/// The timeline's drawing: its lanes and its time axis.
pub struct Timeline {
    /// The window shown (`1h`, `15m`, ...).
    pub window: &'static str,
    /// The windows offered (links above the drawing).
    pub windows: &'static [(&'static str, u64)],
    /// The drawing's geometry, for the template: where a lane's track starts and ends, and
    /// the viewBox's width.
    pub track_from: u32,
    pub track_to: u32,
    pub width: u32,
    pub lanes: Vec<Lane>,
    /// Axis ticks: x and label ("-45 min").
    pub ticks: Vec<(u32, String)>,
    /// The drawing's height (lanes plus the axis).
    pub height: u32,
    pub from: String,
    pub to: String,
}

/// One holder's lane.
pub struct Lane {
    pub label: String,
    /// The lane's top edge.
    pub y: u32,
    pub bars: Vec<Bar>,
    pub marks: Vec<Mark>,
}

/// A hold (or a wait) drawn as a bar.
pub struct Bar {
    pub x: u32,
    pub width: u32,
    /// `hold` or `wait`.
    pub class: &'static str,
    /// The fencing token shown on a hold ("#12"); empty for a wait.
    pub fence: String,
    /// Hover text.
    pub title: String,
}

/// A moment marked on a lane: an expiry, a force release, a reentry.
pub struct Mark {
    pub x: u32,
    /// `expired`, `force_released`, `reentered` (the CSS class and the symbol drawn).
    pub class: &'static str,
    pub title: String,
}

/// The drawing's geometry (SVG user units; the SVG scales to the page's width).
const LABEL_W: u32 = 150;
const PLOT_W: u32 = 830;
/// The whole drawing's width: the plot and a margin for the last tick's label.
const WIDTH: u32 = 1000;
const LANE_H: u32 = 24;
const TOP: u32 = 4;
/// Most lanes drawn: the most recently active holders.
const MAX_LANES: usize = 12;
/// The windows the timeline offers, by their query value; the first is the default.
const WINDOWS: [(&str, u64); 4] = [
    ("1h", 3_600_000),
    ("15m", 900_000),
    ("5m", 300_000),
    ("1m", 60_000),
];

/// The window a query asks for (`?window=15m`). Without one, the shortest that shows all of
/// the last hour's events and waits, with a tenth to spare: a lock taken a minute ago is drawn
/// over the last 5 minutes, not as a sliver at the end of an hour. The last hour when nothing
/// happened in it.
pub(super) fn window(
    raw: Option<&str>,
    events: &[LockEvent],
    waiting: &[WaiterView],
    now_ms: u64,
) -> (&'static str, u64) {
    if let Some(asked) = WINDOWS.into_iter().find(|(name, _)| Some(*name) == raw) {
        return asked;
    }
    let hour_ago = now_ms.saturating_sub(WINDOWS[0].1);
    let oldest = events
        .iter()
        .map(|e| e.at_ms)
        .chain(waiting.iter().map(|w| w.since_ms))
        .filter(|&at| at >= hour_ago)
        .min();
    let Some(oldest) = oldest else {
        return WINDOWS[0];
    };
    let span = now_ms.saturating_sub(oldest) * 11 / 10;
    WINDOWS
        .into_iter()
        .rev()
        .find(|(_, ms)| *ms >= span)
        .unwrap_or(WINDOWS[0])
}

/// What one lease did in the window.
#[derive(Default)]
struct Life {
    label: String,
    wait_from: Option<u64>,
    hold_from: Option<u64>,
    fence: Option<u64>,
    end: Option<(u64, &'static str)>,
    reentries: Vec<u64>,
    last: u64,
}

/// Draws the last `window` of `events` (newest first: the lock's history merged with the
/// holds going on) and the requests waiting now.
pub(super) fn timeline(
    events: &[LockEvent],
    waiting: &[WaiterView],
    now_ms: u64,
    (window, window_ms): (&'static str, u64),
) -> Timeline {
    let from = now_ms.saturating_sub(window_ms);
    let mut lives = lives_of(events);
    for w in waiting {
        let life = lives.entry(w.lease_id.clone()).or_default();
        life.label = w.label();
        life.wait_from = Some(w.since_ms);
        life.last = now_ms;
    }
    // One lane per holder label, the most recently active first.
    let mut by_label: BTreeMap<String, Vec<Life>> = BTreeMap::new();
    for life in lives.into_values() {
        let ends = life.end.map_or(now_ms, |(at, _)| at);
        if ends < from {
            continue;
        }
        by_label.entry(life.label.clone()).or_default().push(life);
    }
    let mut groups: Vec<(String, Vec<Life>)> = by_label.into_iter().collect();
    groups.sort_by_key(|(_, lives)| std::cmp::Reverse(lives.iter().map(|l| l.last).max()));
    groups.truncate(MAX_LANES);
    let x = |t: u64| -> u32 {
        let t = t.clamp(from, now_ms) - from;
        LABEL_W + u32::try_from(t * u64::from(PLOT_W) / window_ms).unwrap_or(PLOT_W)
    };
    let lanes: Vec<Lane> = groups
        .into_iter()
        .zip(0u32..)
        .map(|((label, lives), i)| {
            let mut lane = Lane {
                label,
                y: TOP + i * LANE_H,
                bars: Vec::new(),
                marks: Vec::new(),
            };
            for life in lives {
                draw(&mut lane, &life, now_ms, &x);
            }
            lane
        })
        .collect();
    let height = TOP + u32::try_from(lanes.len()).unwrap_or(0) * LANE_H + 20;
    let ticks = (0..=4)
        .map(|q| {
            let t = from + window_ms * q / 4;
            let ago_s = window_ms * (4 - q) / 4 / 1000;
            let label = match ago_s {
                0 => "now".to_owned(),
                1..60 => format!("-{ago_s} s"),
                _ if ago_s % 60 == 0 => format!("-{} min", ago_s / 60),
                _ => format!("-{} min {} s", ago_s / 60, ago_s % 60),
            };
            (x(t), label)
        })
        .collect();
    Timeline {
        window,
        windows: &WINDOWS,
        track_from: LABEL_W,
        track_to: LABEL_W + PLOT_W,
        width: WIDTH,
        lanes,
        ticks,
        height,
        from: Timestamp(from).rfc3339(),
        to: Timestamp(now_ms).rfc3339(),
    }
}

/// Each lease's life as the events tell it (oldest event first), by lease id.
fn lives_of(events: &[LockEvent]) -> BTreeMap<String, Life> {
    let mut lives: BTreeMap<String, Life> = BTreeMap::new();
    for e in events.iter().rev() {
        let ids: Vec<String> = if e.kind == EventKind::ForceReleased {
            e.removed_lease_ids()
                .into_iter()
                .map(str::to_owned)
                .collect()
        } else {
            e.lease_id.iter().cloned().collect()
        };
        for id in ids {
            let life = lives.entry(id.clone()).or_default();
            if life.label.is_empty() {
                life.label = e.holder.clone().unwrap_or_else(|| short(&id));
            }
            life.last = life.last.max(e.at_ms);
            match &e.kind {
                EventKind::Acquired | EventKind::Granted => {
                    life.hold_from = Some(life.hold_from.map_or(e.at_ms, |h| h.min(e.at_ms)));
                    if let Some(f) = e.details.get("fencing_token").and_then(|v| v.as_u64()) {
                        life.fence = Some(f);
                    }
                }
                EventKind::Queued => life.wait_from = Some(e.at_ms),
                EventKind::Reentered => life.reentries.push(e.at_ms),
                EventKind::Released | EventKind::Left => life.end = Some((e.at_ms, "released")),
                EventKind::Expired => life.end = Some((e.at_ms, "expired")),
                EventKind::ForceReleased => life.end = Some((e.at_ms, "force_released")),
                _ => {}
            }
        }
    }
    lives
}

/// One lease's wait, hold and marks on its lane.
fn draw(lane: &mut Lane, life: &Life, now_ms: u64, x: &impl Fn(u64) -> u32) {
    let end = life.end.map(|(at, _)| at);
    if let Some(w) = life.wait_from {
        let until = life.hold_from.or(end).unwrap_or(now_ms);
        lane.bars.push(Bar {
            x: x(w),
            width: (x(until).saturating_sub(x(w))).max(2),
            class: "wait",
            fence: String::new(),
            title: format!(
                "{} waited from {} to {}",
                lane.label,
                Timestamp(w).rfc3339(),
                Timestamp(until).rfc3339()
            ),
        });
    }
    if let Some(h) = life.hold_from {
        let until = end.unwrap_or(now_ms);
        let width = (x(until).saturating_sub(x(h))).max(2);
        // The token on the bar where it fits (about 6 units a digit); always in the hover text.
        let fence = life
            .fence
            .map(|f| format!("#{f}"))
            .filter(|f| u32::try_from(f.len()).unwrap_or(u32::MAX) * 6 + 6 <= width)
            .unwrap_or_default();
        let how = match life.end {
            Some((_, how)) => how.replace('_', " "),
            None => "still held".to_owned(),
        };
        lane.bars.push(Bar {
            x: x(h),
            width,
            class: "hold",
            title: format!(
                "{} held from {} to {} ({how}), fencing token {}",
                lane.label,
                Timestamp(h).rfc3339(),
                Timestamp(until).rfc3339(),
                life.fence.map_or_else(|| "?".to_owned(), |f| f.to_string())
            ),
            fence,
        });
    }
    for &r in &life.reentries {
        lane.marks.push(Mark {
            x: x(r),
            class: "reentered",
            title: format!("{} re-entered at {}", lane.label, Timestamp(r).rfc3339()),
        });
    }
    if let Some((at, how @ ("expired" | "force_released"))) = life.end {
        lane.marks.push(Mark {
            x: x(at),
            class: how,
            title: format!(
                "{} {} at {}",
                lane.label,
                how.replace('_', " "),
                Timestamp(at).rfc3339()
            ),
        });
    }
}

/// A lease id shortened for a lane's label.
fn short(id: &str) -> String {
    format!("lease {}", id.get(..8).unwrap_or(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(json: serde_json::Value) -> LockEvent {
        serde_json::from_value(json).expect("event")
    }

    #[test]
    fn a_hold_that_expired_is_a_bar_with_its_fence_and_an_expiry_mark() {
        let now = 10_000_000;
        let events = vec![
            event(
                serde_json::json!({"type": "expired", "lock": "a", "at_ms": now - 600_000,
                "lease_id": "l1", "holder": "cron", "fencing_token": 7, "since_ms": now - 1_200_000}),
            ),
            event(
                serde_json::json!({"type": "acquired", "lock": "a", "at_ms": now - 1_200_000,
                "lease_id": "l1", "holder": "cron", "fencing_token": 7}),
            ),
            event(
                serde_json::json!({"type": "acquired", "lock": "a", "at_ms": now - 7_200_000,
                "lease_id": "old", "holder": "gone"}),
            ),
            event(
                serde_json::json!({"type": "released", "lock": "a", "at_ms": now - 7_000_000,
                "lease_id": "old", "holder": "gone"}),
            ),
        ];
        let t = timeline(&events, &[], now, window(Some("1h"), &[], &[], now));
        assert_eq!(
            t.lanes.len(),
            1,
            "holds that ended before the window are left out"
        );
        let lane = &t.lanes[0];
        assert_eq!(lane.label, "cron");
        assert_eq!(lane.bars.len(), 1);
        assert_eq!(lane.bars[0].fence, "#7", "a short token fits its bar");
        assert_eq!(lane.bars[0].class, "hold");
        // 20 min to 10 min ago: a sixth of the plot, starting two thirds in.
        assert_eq!(lane.bars[0].x, LABEL_W + PLOT_W * 2 / 3);
        assert_eq!(lane.marks.len(), 1);
        assert_eq!(lane.marks[0].class, "expired");
    }

    #[test]
    fn without_a_window_asked_for_the_drawing_zooms_to_what_happened() {
        let now = 10_000_000;
        let at = |ago: u64| {
            vec![event(serde_json::json!({"type": "acquired", "lock": "a",
                "at_ms": now - ago, "lease_id": "l1", "holder": "cron"}))]
        };
        assert_eq!(window(None, &at(30_000), &[], now).0, "1m");
        assert_eq!(
            window(None, &at(58_000), &[], now).0,
            "5m",
            "with a tenth to spare"
        );
        assert_eq!(window(None, &at(600_000), &[], now).0, "15m");
        assert_eq!(window(None, &at(3_000_000), &[], now).0, "1h");
        assert_eq!(
            window(None, &at(7_200_000), &[], now).0,
            "1h",
            "nothing in the hour"
        );
        assert_eq!(window(None, &[], &[], now).0, "1h");
        assert_eq!(
            window(Some("15m"), &at(30_000), &[], now).0,
            "15m",
            "asked for"
        );
    }

    #[test]
    fn a_request_waiting_now_is_a_wait_bar_up_to_now() {
        let now = 10_000_000;
        let waiter = WaiterView {
            lease_id: "w1".into(),
            holder: Some("next".into()),
            kind: Some("write".into()),
            permits: None,
            since_ms: now - 900_000,
            instance: "h:1".into(),
            until_ms: now + 1000,
        };
        let t = timeline(&[], &[waiter], now, window(Some("15m"), &[], &[], now));
        let bar = &t.lanes[0].bars[0];
        assert_eq!(
            (bar.class, bar.x, bar.x + bar.width),
            ("wait", LABEL_W, LABEL_W + PLOT_W)
        );
        assert_eq!(t.ticks[0].1, "-15 min");
    }
}
