//! The label sets of the metrics: bounded values only (kinds, outcomes, script names, route
//! templates), and lock names only with `--metrics-lock-names`.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelSetEncoder};

use crate::locks::LeaseKind;

/// A lease kind as a label value (`other` for a reentry refused before its kind was known).
pub(super) fn kind_label(kind: Option<LeaseKind>) -> &'static str {
    kind.map_or("other", LeaseKind::as_str)
}

/// A label value from a fixed set of names (outcomes, wake-ups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Label(pub(super) &'static str);

impl EncodeLabelValue for Label {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct AcquireLabels {
    pub(super) kind: &'static str,
    pub(super) outcome: Label,
    /// Only with `--metrics-lock-names`.
    pub(super) lock: Option<String>,
}

impl EncodeLabelSet for AcquireLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel as _;
        ("kind", self.kind).encode(encoder.encode_label())?;
        ("outcome", self.outcome).encode(encoder.encode_label())?;
        if let Some(lock) = &self.lock {
            ("lock", lock.as_str()).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct KindLabels {
    pub(super) kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct WaitLabels {
    pub(super) kind: &'static str,
    pub(super) outcome: Label,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct HandoffLabels {
    pub(super) kind: &'static str,
    pub(super) wake: Label,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct LateLabels {
    /// `renewed`: came with less than a third of the TTL left; `expired`: came after it ran out.
    pub(super) outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ScriptLabels {
    pub(super) script: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct NodeCallLabels {
    /// A RedLock node's URL, its credentials taken out (one series per configured node).
    pub(super) node: String,
    pub(super) script: &'static str,
    pub(super) outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct NodeLabels {
    pub(super) node: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct HttpLabels {
    pub(super) method: &'static str,
    /// The route template (`/v1/locks/{name}`), never the concrete path; `unmatched` for 404s
    /// of the fallback.
    pub(super) route: String,
    pub(super) status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct RouteLabels {
    pub(super) method: &'static str,
    pub(super) route: String,
}
