-- The reasoning's tokens, counted apart when the answer is written: they join the prompt's
-- sum only for templates that send reasoning back (llm_config.send_reasoning).
alter table messages
    add column reasoning_tokens integer not null default 0;

-- Rows written before the column existed: a rough count (about three characters a token).
update messages
    set reasoning_tokens = length(reasoning) / 3
    where reasoning is not null;
