//! A run's budgets: the tokens and dollars the completions the guest received have spent,
//! whether a new leaf may start, and the token warnings at 80 % and at the ceiling.
//!
//! Only delivered completions count, so the budget a script sees depends on nothing but what
//! it received — which is what makes a replay spend exactly the same.

use flowbox_backends::Usage;

use crate::plan::{Price, picos, usd};

/// Tokens spent against an optional ceiling.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    total: Option<u64>,
    spent: Usage,
    warned_at_80: bool,
    warned_at_100: bool,
}

impl Budget {
    /// A budget of `total` tokens (`None`: no ceiling).
    pub(crate) fn new(total: Option<u64>) -> Self {
        Self {
            total,
            ..Self::default()
        }
    }

    /// The ceiling.
    pub(crate) fn total(&self) -> Option<u64> {
        self.total
    }

    /// Tokens of the completions delivered so far.
    pub(crate) fn spent(&self) -> Usage {
        self.spent
    }

    /// `Some((spent, total))` when the ceiling is reached and no new leaf may start.
    pub(crate) fn exhausted(&self) -> Option<(u64, u64)> {
        let total = self.total?;
        let spent = self.spent.total();
        (spent >= total).then_some((spent, total))
    }

    /// Counts a delivered completion's tokens.
    pub(crate) fn count(&mut self, usage: Usage) {
        self.spent.input_tokens += usage.input_tokens;
        self.spent.output_tokens += usage.output_tokens;
        self.spent.estimated_tokens += usage.estimated_tokens;
    }

    /// `Some((spent, total))` the first time spending crosses 80 % of the ceiling and the
    /// first time it reaches the ceiling: the moments a warning is due.
    pub(crate) fn warning_due(&mut self) -> Option<(u64, u64)> {
        let total = self.total?;
        let spent = self.spent.total();
        let crossed_80 = !self.warned_at_80 && spent.saturating_mul(10) >= total.saturating_mul(8);
        let crossed_100 = !self.warned_at_100 && spent >= total;
        if !(crossed_80 || crossed_100) {
            return None;
        }
        self.warned_at_80 = true;
        self.warned_at_100 |= crossed_100;
        Some((spent, total))
    }
}

/// What a started leaf may cost: its model's price, and the worst case reserved for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeafCost {
    pub price: Price,
    /// Pico-dollars: its input estimate and output ceiling at `price`.
    pub reserved: u128,
}

/// Dollars spent against an optional ceiling, in pico-dollars, and what the leaves in flight
/// may still cost. A leaf may start only while spent + reserved + its own worst case stays
/// within the ceiling, so leaves started together cannot pass it between them either.
#[derive(Debug, Default)]
pub(crate) struct Dollars {
    total: Option<u128>,
    /// `None` when unknown: no price table, or a delivered leaf on an unpriced model.
    spent: Option<u128>,
    reserved: u128,
}

impl Dollars {
    /// A ceiling of `total` dollars (`None`: none); `priced` says whether leaves are priced at
    /// all (the runtime has a price table).
    pub(crate) fn new(total: Option<f64>, priced: bool) -> Self {
        Self {
            total: total.map(picos),
            spent: priced.then_some(0),
            reserved: 0,
        }
    }

    /// Whether a ceiling is set.
    pub(crate) fn limited(&self) -> bool {
        self.total.is_some()
    }

    /// Why a leaf whose worst case is `worst` may not start, when it may not.
    pub(crate) fn refusal(&self, worst: u128) -> Option<String> {
        let total = self.total?;
        let spent = self.spent.unwrap_or(0);
        let committed = spent.saturating_add(self.reserved).saturating_add(worst);
        (committed > total).then(|| {
            format!(
                "the dollar budget of {} would be passed: {} spent, {} in flight and this \
                 leaf's worst case {}; no new leaf can start",
                dollars(total),
                dollars(spent),
                dollars(self.reserved),
                dollars(worst)
            )
        })
    }

    /// Holds a started leaf's worst case until it is delivered.
    pub(crate) fn reserve(&mut self, cost: &LeafCost) {
        self.reserved = self.reserved.saturating_add(cost.reserved);
    }

    /// Counts a delivered leaf's `usage` at its price (`None`: unpriced) and releases its
    /// reservation.
    pub(crate) fn settle(&mut self, cost: Option<&LeafCost>, usage: Usage) {
        match cost {
            Some(cost) => {
                self.reserved = self.reserved.saturating_sub(cost.reserved);
                self.spent = self
                    .spent
                    .map(|spent| spent.saturating_add(cost.price.cost(usage)));
            }
            None => self.spent = None,
        }
    }

    /// The ceiling in dollars.
    pub(crate) fn total_usd(&self) -> Option<f64> {
        self.total.map(usd)
    }

    /// Dollars spent by the delivered leaves, when known.
    pub(crate) fn spent_usd(&self) -> Option<f64> {
        self.spent.map(usd)
    }
}

/// Pico-dollars as text for messages: `$0.012345`.
pub(crate) fn dollars(picos: u128) -> String {
    format!("${:.6}", usd(picos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: u64) -> Usage {
        Usage {
            input_tokens: n,
            output_tokens: 0,
            estimated_tokens: 0,
        }
    }

    #[test]
    fn warns_once_at_80_percent_and_once_at_the_ceiling() {
        let mut budget = Budget::new(Some(100));
        budget.count(tokens(79));
        assert_eq!(budget.warning_due(), None);
        budget.count(tokens(1));
        assert_eq!(budget.warning_due(), Some((80, 100)));
        budget.count(tokens(10));
        assert_eq!(budget.warning_due(), None);
        assert_eq!(budget.exhausted(), None);
        budget.count(tokens(10));
        assert_eq!(budget.warning_due(), Some((100, 100)));
        assert_eq!(budget.warning_due(), None);
        assert_eq!(budget.exhausted(), Some((100, 100)));
    }

    #[test]
    fn estimated_tokens_count_like_reported_ones_and_are_kept_apart() {
        let mut budget = Budget::new(Some(100));
        budget.count(Usage::reported(30, 10));
        budget.count(Usage::estimated(40, 20));
        assert_eq!(budget.spent().total(), 100);
        assert_eq!(budget.spent().estimated_tokens, 60);
        assert_eq!(budget.exhausted(), Some((100, 100)));
    }

    #[test]
    fn no_ceiling_never_warns_or_refuses() {
        let mut budget = Budget::new(None);
        budget.count(tokens(u64::MAX / 2));
        assert_eq!(budget.warning_due(), None);
        assert_eq!(budget.exhausted(), None);
    }

    fn price() -> Price {
        crate::plan::PriceTable::from_json(
            r#"{"written": "2025-11-30", "models": {"m": {"input": 1, "output": 2}}}"#,
        )
        .unwrap()
        .price("m")
        .unwrap()
    }

    #[test]
    fn dollars_refuse_a_leaf_whose_worst_case_would_pass_with_those_in_flight() {
        // $1 per million input tokens, $2 per million output tokens; a budget of $0.01.
        let mut dollars = Dollars::new(Some(0.01), true);
        let worst = price().cost(Usage {
            input_tokens: 1000,
            output_tokens: 2000,
            estimated_tokens: 0,
        });
        assert_eq!(worst, picos(0.005));
        let cost = LeafCost {
            price: price(),
            reserved: worst,
        };
        assert_eq!(dollars.refusal(worst), None);
        dollars.reserve(&cost);
        assert_eq!(dollars.refusal(worst), None);
        dollars.reserve(&cost);
        let refusal = dollars.refusal(worst).unwrap();
        assert!(
            refusal.contains("$0.000000 spent, $0.010000 in flight"),
            "{refusal}"
        );
        // Delivered at half their worst cases, both leaves free room for one more.
        let half = Usage {
            input_tokens: 500,
            output_tokens: 1000,
            estimated_tokens: 0,
        };
        dollars.settle(Some(&cost), half);
        assert_eq!(dollars.spent_usd(), Some(0.0025));
        assert!(dollars.refusal(worst).is_some(), "one is still in flight");
        dollars.settle(Some(&cost), half);
        assert_eq!(dollars.spent_usd(), Some(0.005));
        assert_eq!(dollars.refusal(worst), None);
        dollars.settle(None, Usage::default());
        assert_eq!(dollars.spent_usd(), None);
    }
}
