//! The one-turn chat prompt used by `--chat` when no template is rendered: ChatML, Llama 3
//! and Zephyr styles, picked from the model's chat template text.

/// The prompt for one user message, in the style the model's chat template uses:
/// Llama 3 headers (`<|start_header_id|>`), Zephyr/TinyLlama turns (`<|user|>`), else ChatML
/// (SmolLM2, Qwen, ...; the template's default system message when it has one). Ends with
/// the opening of the assistant turn. BOS is not written here: the tokenizer adds it.
pub fn chat_prompt(template: Option<&str>, user: &str) -> String {
    let t = template.unwrap_or("");
    if t.contains("<|start_header_id|>") {
        return format!(
            "<|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }
    if t.contains("<|user|>") {
        let eos = if t.contains("eos_token") { "</s>" } else { "" };
        return format!("<|user|>\n{user}{eos}\n<|assistant|>\n");
    }
    let mut s = String::new();
    let start = "<|im_start|>system\n";
    if let Some(i) = t.find(start) {
        let rest = &t[i + start.len()..];
        if let Some(end) = rest.find("<|im_end|>") {
            s.push_str(start);
            s.push_str(&rest[..end]);
            s.push_str("<|im_end|>\n");
        }
    }
    s.push_str("<|im_start|>user\n");
    s.push_str(user);
    s.push_str("<|im_end|>\n<|im_start|>assistant\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_prompt_with_default_system() {
        let t = "{{ '<|im_start|>system\nYou are nice<|im_end|>\n' }}";
        assert_eq!(
            chat_prompt(Some(t), "hi"),
            "<|im_start|>system\nYou are nice<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n\
             <|im_start|>assistant\n"
        );
        assert!(chat_prompt(None, "x").starts_with("<|im_start|>user\nx"));
    }

    #[test]
    fn llama3_and_zephyr_prompts() {
        let l3 = "{% set content = '<|start_header_id|>' + message['role'] %}";
        assert_eq!(
            chat_prompt(Some(l3), "Hi"),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        let zephyr =
            "{% if message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + eos_token }}";
        assert_eq!(
            chat_prompt(Some(zephyr), "Hi"),
            "<|user|>\nHi</s>\n<|assistant|>\n"
        );
        assert!(chat_prompt(None, "Hi").starts_with("<|im_start|>user\nHi"));
    }
}
