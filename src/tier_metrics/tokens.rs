//! What L4 (the next token against the golden's) and L5 (greedy generation against the
//! golden's) record.

use super::json::metrics;

metrics! {
    /// L4: the last position's top-1 and top-10 against the golden's and the live reference's.
    pub struct L4Metrics {
        pub top1: i64,
        pub golden_top1: i64,
        /// `top1 − top2` of the export's logits (`null` in JSON when there is no second logit).
        pub top1_gap: f64,
        /// The top-10 ids of the export, the golden and the live reference (the report's table).
        pub top10: Vec<i64>,
        pub golden_top10: Vec<i64>,
        pub reference_top1: i64,
        pub reference_top10_jaccard: f64,
        pub reference_top10: Vec<i64>,
    }
}

metrics! {
    /// L5: the export's greedy tokens against the golden's and the live reference's.
    pub struct L5Metrics {
        pub positional_ratio: f64,
        pub generated: usize,
        pub reference_token_match_ratio: f64,
        pub tokens: Vec<i64>,
        pub golden_tokens: Vec<i64>,
        pub reference_tokens: Vec<i64>,
        /// Where the case has a tokenizer: the export's and the golden's tokens decoded.
        pub text: String,
        pub golden_text: String,
    }
}
