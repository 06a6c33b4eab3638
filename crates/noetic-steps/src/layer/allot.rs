//! Dividing the room of a request between the memory layers' recall and the history (the rule is in the
//! `noetic::window` docs).

use super::Budget;
use crate::error::{ConfigCode, ConfigError};

/// Hands the layers their budgets one after another, in slot order: each is offered its `max`, bounded by the room
/// left after what the layers before it used and the minimums of the layers after it, and never less than its
/// `min`. What the layers leave goes to the history.
#[derive(Debug, Clone)]
pub struct Allotter {
    left: u32,
    /// For each layer, the sum of the minimums of the layers after it.
    later_minimums: Vec<u32>,
    budgets: Vec<Budget>,
    next: usize,
}

impl Allotter {
    /// Shares `room` tokens between layers with these budgets (in slot order).
    pub fn new(room: u32, budgets: impl IntoIterator<Item = Budget>) -> Self {
        let budgets: Vec<Budget> = budgets.into_iter().collect();
        let mut later_minimums = vec![0u32; budgets.len()];
        let mut sum = 0u32;
        for (i, b) in budgets.iter().enumerate().rev() {
            later_minimums[i] = sum;
            sum = sum.saturating_add(b.min);
        }
        Allotter { left: room, later_minimums, budgets, next: 0 }
    }

    /// The budget the next layer is offered.
    pub fn offer(&self) -> u32 {
        let Some(budget) = self.budgets.get(self.next) else { return 0 };
        let later = self.later_minimums.get(self.next).copied().unwrap_or(0);
        budget.max.min(self.left.saturating_sub(later)).max(budget.min)
    }

    /// The layer that was offered [`Allotter::offer`] used `tokens` (at most what it was offered); the next one is
    /// offered what is left.
    pub fn took(&mut self, tokens: u32) {
        self.left = self.left.saturating_sub(tokens.min(self.offer()));
        self.next += 1;
    }

    /// The room left for the history.
    pub fn left(&self) -> u32 {
        self.left
    }
}

/// Checks that the layers' minimums fit in `room` (the window of `model` less the answer's reserve and the
/// instructions): a [`ConfigError`] naming the layers and their minimums when they do not.
pub fn check_minimums<'a>(
    room: u32,
    layers: impl IntoIterator<Item = (&'a str, Budget)>,
    model: &str,
) -> Result<(), ConfigError> {
    let layers: Vec<(&str, Budget)> = layers.into_iter().filter(|(_, b)| b.min > 0).collect();
    let sum = layers.iter().fold(0u64, |sum, (_, b)| sum + u64::from(b.min));
    if sum <= u64::from(room) {
        return Ok(());
    }
    let named: Vec<String> = layers.iter().map(|(id, b)| format!("'{id}' (min {})", b.min)).collect();
    Err(ConfigError::new(
        ConfigCode::LayerMinimumsExceedWindow,
        format!(
            "the memory layers' guaranteed budgets add up to {sum} tokens, more than the {room} tokens model '{model}' \
             has for a request: {}",
            named.join(", ")
        ),
        "lower the layers' budget minimums, or use a model with a larger context window",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(min: u32, max: u32) -> Budget {
        Budget { min, max }
    }

    /// Every layer takes all it is offered.
    fn greedy(room: u32, budgets: &[Budget]) -> (Vec<u32>, u32) {
        let mut a = Allotter::new(room, budgets.iter().copied());
        let mut offers = Vec::new();
        for _ in budgets {
            let offer = a.offer();
            offers.push(offer);
            a.took(offer);
        }
        (offers, a.left())
    }

    #[test]
    fn every_combination_of_minimums_and_maximums_that_fits_guarantees_each_minimum_and_caps_each_maximum() {
        let values = [0u32, 10, 40, 100];
        let room = 150;
        let mut checked = 0;
        for &m1 in &values {
            for &m2 in &values {
                for &m3 in &values {
                    for &x1 in &values {
                        for &x2 in &values {
                            for &x3 in &values {
                                let budgets = [b(m1, x1.max(m1)), b(m2, x2.max(m2)), b(m3, x3.max(m3))];
                                let fits = check_minimums(
                                    room,
                                    [("a", budgets[0]), ("b", budgets[1]), ("c", budgets[2])],
                                    "m",
                                );
                                if m1 + m2 + m3 > room {
                                    assert!(fits.is_err(), "{budgets:?}");
                                    continue;
                                }
                                assert!(fits.is_ok(), "{budgets:?}");
                                let (offers, left) = greedy(room, &budgets);
                                let used: u32 = offers.iter().sum();
                                assert_eq!(used + left, room, "{budgets:?}: nothing is lost or made up");
                                for (offer, budget) in offers.iter().zip(&budgets) {
                                    assert!(*offer >= budget.min, "{budgets:?}: {offers:?} keeps every minimum");
                                    assert!(*offer <= budget.max, "{budgets:?}: {offers:?} caps every maximum");
                                }
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 1_000);
    }

    #[test]
    fn what_a_layer_leaves_unused_goes_to_the_layers_after_it_and_then_the_history() {
        let mut a = Allotter::new(1_000, [b(0, 500), b(100, 800)]);
        assert_eq!(a.offer(), 500);
        a.took(50);
        assert_eq!(a.offer(), 800);
        a.took(200);
        assert_eq!(a.left(), 750);
    }

    #[test]
    fn minimums_that_do_not_fit_are_a_configuration_error_naming_the_layers() {
        let e =
            check_minimums(1_000, [("notes", b(600, 900)), ("rag", b(500, 500)), ("free", b(0, 10))], "gpt-x").err();
        let e = e.map(|e| (e.code, e.message)).unwrap_or((ConfigCode::EmptyStepId, String::new()));
        assert_eq!(e.0, ConfigCode::LayerMinimumsExceedWindow);
        assert!(e.1.contains("'notes' (min 600), 'rag' (min 500)") && !e.1.contains("free"), "{}", e.1);
    }
}
