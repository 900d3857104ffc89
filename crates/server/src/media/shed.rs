//! Graceful overload: before the clock has to skip a tick, it sheds codec
//! work in steps that keep audio flowing (`tutti_mix::Room::set_shed_level`:
//! lower encoder complexity first, then fewer speakers), and it gives the
//! work back when ticks are cheap again. A pure decision, fed each tick's
//! duration; the clock applies it, logs it and counts it.

use std::time::Duration;

/// Ticks over [`SHED_AT`] of the budget, in a row, before shedding one step more.
const OVER_TICKS: u32 = 2;
/// Ticks under [`RESTORE_AT`] of the budget, in a row, before giving one step back.
const UNDER_TICKS: u32 = 50;
/// Share of the 20 ms budget above which a tick counts as too slow.
const SHED_AT: f64 = 0.6;
/// Share of the budget below which a tick counts as cheap.
const RESTORE_AT: f64 = 0.3;

/// The clock's shed level and the streaks that move it.
#[derive(Debug, Default)]
pub(crate) struct Shedder {
    level: u8,
    over: u32,
    under: u32,
}

impl Shedder {
    /// The level every room ticks at now.
    pub(crate) fn level(&self) -> u8 {
        self.level
    }

    /// Takes one tick's duration; returns the new level when it changed.
    pub(crate) fn after_tick(&mut self, took: Duration, budget: Duration) -> Option<u8> {
        let share = took.as_secs_f64() / budget.as_secs_f64();
        if share > SHED_AT {
            self.under = 0;
            self.over += 1;
            if self.over >= OVER_TICKS && self.level < tutti_mix::MAX_SHED_LEVEL {
                self.over = 0;
                self.level += 1;
                return Some(self.level);
            }
        } else if share < RESTORE_AT {
            self.over = 0;
            self.under += 1;
            if self.under >= UNDER_TICKS && self.level > 0 {
                self.under = 0;
                self.level -= 1;
                return Some(self.level);
            }
        } else {
            self.over = 0;
            self.under = 0;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_millis(20);
    const SLOW: Duration = Duration::from_millis(15);
    const FAST: Duration = Duration::from_millis(2);
    const MIDDLE: Duration = Duration::from_millis(9);

    #[test]
    fn slow_ticks_shed_step_by_step_and_cheap_ones_give_back_slowly() {
        let mut s = Shedder::default();
        assert_eq!(s.after_tick(SLOW, BUDGET), None, "one slow tick is not a trend");
        assert_eq!(s.after_tick(SLOW, BUDGET), Some(1));
        assert_eq!(s.after_tick(MIDDLE, BUDGET), None);
        assert_eq!(s.after_tick(SLOW, BUDGET), None, "the streak started again");
        assert_eq!(s.after_tick(SLOW, BUDGET), Some(2));
        for _ in 0..20 {
            s.after_tick(SLOW, BUDGET);
        }
        assert_eq!(s.level(), tutti_mix::MAX_SHED_LEVEL, "never past the last step");
        for _ in 0..UNDER_TICKS - 1 {
            assert_eq!(s.after_tick(FAST, BUDGET), None);
        }
        assert_eq!(s.after_tick(FAST, BUDGET), Some(tutti_mix::MAX_SHED_LEVEL - 1));
        for _ in 0..10 * UNDER_TICKS {
            s.after_tick(FAST, BUDGET);
        }
        assert_eq!(s.level(), 0, "all given back, and no lower");
    }
}
