//! A run's token budget: what the completions the guest received have spent, whether a new
//! leaf may start, and the warnings at 80 % and at the ceiling.
//!
//! Only delivered completions count, so the budget a script sees depends on nothing but what
//! it received — which is what makes a replay spend exactly the same.

use flowbox_backends::Usage;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: u64) -> Usage {
        Usage {
            input_tokens: n,
            output_tokens: 0,
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
    fn no_ceiling_never_warns_or_refuses() {
        let mut budget = Budget::new(None);
        budget.count(tokens(u64::MAX / 2));
        assert_eq!(budget.warning_due(), None);
        assert_eq!(budget.exhausted(), None);
    }
}
