//! What the decoder tests share: comparing two models' logits and greedy tokens.

#![allow(dead_code)] // each test binary uses its own subset

/// The largest |GPU - CPU f32| logit over each step's largest |CPU f32| logit, along one
/// token sequence (see `LlamaDecoder::forced_logits`).
pub fn worst_relative_error(want: &[Vec<f32>], got: &[Vec<f32>]) -> f32 {
    assert_eq!(want.len(), got.len());
    let mut worst = 0f32;
    for (a, b) in want.iter().zip(got) {
        assert_eq!(a.len(), b.len());
        let scale = a.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(diff.is_finite(), "non-finite logits");
        worst = worst.max(diff / scale);
    }
    worst
}

/// Checks `got` (greedy tokens of a model under test) against `want` (the CPU's in f32) over
/// the first `n`: equal, except that they may part at a near-tie of the CPU's own logits (the
/// steps of `reference`, the CPU's forced logits along `want`), where the token taken instead
/// is within `2 * tol` (relative to the step's largest |logit|) of the CPU's best, both
/// models' logits being within `tol` of the truth. Comparison stops where they part. Returns
/// the step where they parted, if they did.
pub fn assert_follows(
    what: &str,
    want: &[u32],
    got: &[u32],
    reference: &[Vec<f32>],
    n: usize,
    tol: f32,
) -> Option<usize> {
    let k = n.min(want.len());
    let Some(i) = (0..k.min(got.len())).find(|&i| got[i] != want[i]) else {
        assert!(got.len() >= k, "{what}: {} tokens, want {k}", got.len());
        return None;
    };
    let row = &reference[i];
    let scale = row.iter().fold(0f32, |m, x| m.max(x.abs()));
    let margin = (row[want[i] as usize] - row[got[i] as usize]) / scale;
    eprintln!("{what}: parts from the CPU's tokens at step {i}, on a margin of {margin:.4}");
    assert!(
        margin <= 2. * tol,
        "{what}: token {i} is {} where the CPU has {}, whose logit is higher by {margin} \
         (relative), not a near-tie; GPU {got:?}, CPU {want:?}",
        got[i],
        want[i]
    );
    Some(i)
}
