//! Chat templates: the model's own Jinja template (from `tokenizer_config.json` or the
//! GGUF's `tokenizer.chat_template`) rendered with minijinja over a list of messages, as
//! transformers' `apply_chat_template` does; ChatML when the model has none.

use crate::LlmError;
use minijinja::{Environment, Error, ErrorKind};
use rlx_models::llama::Llama;
use serde::{Deserialize, Serialize};

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` (or another role the template knows)
    pub role: String,
    /// the text of the turn
    pub content: String,
}

impl Message {
    /// A message of `role` with `content`.
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// ChatML, for models without a template of their own.
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + \
    '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if \
    add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Renders `template` (None: [`CHATML`]) over `messages`, ending with the opening of the
/// assistant's turn when `add_generation_prompt`. `bos`/`eos` are the strings templates
/// know as `bos_token`/`eos_token`.
///
/// # Errors
/// A template that does not parse, or that raises (`raise_exception`, e.g. roles out of
/// order), as [`LlmError::Invalid`].
pub fn render(
    template: Option<&str>,
    messages: &[Message],
    bos: &str,
    eos: &str,
    add_generation_prompt: bool,
) -> Result<String, LlmError> {
    let mut env = Environment::new();
    // as transformers renders them
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", |_fmt: String| -> String {
        // templates print today's date in a system line; a fixed date keeps prompts stable
        "01 Jan 2026".to_string()
    });
    let source = template.unwrap_or(CHATML);
    let bad = |e: Error| {
        let mut m = format!("chat template: {e}");
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            m.push_str(&format!(": {s}"));
            src = s.source();
        }
        LlmError::Invalid(m)
    };
    env.add_template("chat", source).map_err(bad)?;
    let t = env.get_template("chat").map_err(bad)?;
    t.render(minijinja::context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => bos,
        eos_token => eos,
    })
    .map_err(bad)
}

/// The prompt text for `messages` with `model`'s template, ready for its tokenizer: a BOS
/// the template writes is dropped when the tokenizer adds one itself.
///
/// # Errors
/// As [`render`].
pub fn prompt(model: &Llama, messages: &[Message]) -> Result<String, LlmError> {
    let tok = &model.tokenizer;
    let name = |id: Option<u32>| {
        id.and_then(|i| tok.decode(&[i], false).ok())
            .unwrap_or_default()
    };
    let (bos, eos) = (name(tok.bos), name(tok.eos));
    let text = render(tok.chat_template.as_deref(), messages, &bos, &eos, true)?;
    if tok.add_bos && !bos.is_empty() {
        if let Some(rest) = text.strip_prefix(&bos) {
            return Ok(rest.to_string());
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_by_default() {
        let m = [
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
        ];
        assert_eq!(
            render(None, &m, "", "", true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }

    #[test]
    fn llama3_style_template_with_python_methods() {
        let t = "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + \
                 message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + \
                 '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ \
                 '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
        let m = [Message::new("user", "  Hello  ")];
        assert_eq!(
            render(Some(t), &m, "<|begin_of_text|>", "", true).unwrap(),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        let py = "{% for m in messages %}{{ m.content.strip().upper() }}{% endfor %}";
        assert_eq!(render(Some(py), &m, "", "", false).unwrap(), "HELLO");
    }

    #[test]
    fn raise_exception_and_bad_syntax_are_errors() {
        let t = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation \
                 roles must alternate') }}{% endif %}";
        let e = render(Some(t), &[Message::new("assistant", "x")], "", "", true).unwrap_err();
        assert!(e.to_string().contains("roles must alternate"), "{e}");
        let e = render(Some("{% for %}"), &[], "", "", true).unwrap_err();
        assert!(e.to_string().starts_with("chat template:"), "{e}");
    }
}
