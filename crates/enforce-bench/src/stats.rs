//! The one median of the harness: every "median of N runs" in BENCHMARKS.md is this; and
//! how the tables list the figure of each round.

/// The median of `values`: the middle one, or the mean of the two middle ones of an even
/// count; NaN when there are none.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Each round's figure in ms, as the tables list them: `0.412 0.398 0.405`.
pub fn rounds(values: &[f64]) -> String {
    let each: Vec<String> = values.iter().map(|x| format!("{x:.3}")).collect();
    each.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
