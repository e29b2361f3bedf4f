//! Token ids to text as they come, with stop strings.

use crate::LlmError;
use rlx_gguf::ChatTokenizer;

/// Turns generated ids into text pieces as they come: a piece never ends inside a UTF-8
/// character, and text that may begin a stop string is held back until it is known not
/// to; at a stop string the text ends before it.
pub struct TextStream<'t> {
    tok: &'t ChatTokenizer,
    ids: Vec<u32>,
    stops: Vec<String>,
    /// bytes of the decoded text already handed out
    sent: usize,
    /// the final text once a stop string was found
    stopped: Option<String>,
}

impl<'t> TextStream<'t> {
    /// A stream decoding with `tok`, ending at any of `stops` (empty strings ignored).
    pub fn new(tok: &'t ChatTokenizer, stops: &[String]) -> Self {
        TextStream {
            tok,
            ids: Vec::new(),
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            sent: 0,
            stopped: None,
        }
    }

    /// Adds a generated id; returns the text that can be handed out now (maybe empty).
    ///
    /// # Errors
    /// The tokenizer cannot decode the ids.
    pub fn push(&mut self, id: u32) -> Result<String, LlmError> {
        if self.stopped.is_some() {
            return Ok(String::new());
        }
        self.ids.push(id);
        let text = self.decode()?;
        if let Some(end) = self
            .stops
            .iter()
            .filter_map(|s| text.find(s.as_str()))
            .min()
        {
            let piece = text.get(self.sent..end).unwrap_or("").to_string();
            self.sent = self.sent.max(end);
            self.stopped = Some(text[..end].to_string());
            return Ok(piece);
        }
        // a replacement character at the end: the id ends mid-character
        let mut end = text.len();
        if text.ends_with('\u{FFFD}') {
            end -= '\u{FFFD}'.len_utf8();
        }
        // hold back a tail that could start a stop string
        let mut hold = end;
        for s in &self.stops {
            for k in (1..s.len()).rev() {
                if s.is_char_boundary(k) && end >= k && text[..end].ends_with(&s[..k]) {
                    hold = hold.min(end - k);
                    break;
                }
            }
        }
        if hold <= self.sent || !text.is_char_boundary(hold) || !text.is_char_boundary(self.sent) {
            return Ok(String::new());
        }
        let piece = text[self.sent..hold].to_string();
        self.sent = hold;
        Ok(piece)
    }

    /// The rest of the text once generation ends (what was held back, unless a stop
    /// string ended it).
    ///
    /// # Errors
    /// The tokenizer cannot decode the ids.
    pub fn finish(&mut self) -> Result<String, LlmError> {
        if self.stopped.is_some() {
            return Ok(String::new());
        }
        let text = self.decode()?;
        let piece = text.get(self.sent..).unwrap_or("").to_string();
        self.sent = text.len();
        Ok(piece)
    }

    /// Whether a stop string ended the text.
    pub fn stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// Ids pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    fn decode(&self) -> Result<String, LlmError> {
        self.tok
            .decode_continuation(&self.ids, true)
            .map_err(|e| LlmError::Run(format!("decoding tokens: {e}")))
    }
}
