-- Context thrift: what the tool schemas offered to the model cost, against offering every
-- tool the agent may use (estimated tokens, summed over the session's model calls).
alter table sessions
    add column tool_tokens_offered bigint not null default 0,
    add column tool_tokens_all bigint not null default 0;
