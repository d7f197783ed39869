-- Seed 003's model: versioned agent templates with their policies, the template -> tool
-- relation, the pool of long-lived agent instances and the session state machine.

-- The definition (jsonb) stays the one source of truth: "a new version only when it
-- changed" is one equality test on it, and an old version is read back exactly as written.
-- Seed 003's columns are generated from it, so they never disagree with it while SQL can
-- still filter and index on base_class, tool_policy and the rest.
create extension if not exists vector with schema public;

-- Rows written before this migration keep their meaning in seed 003's shape.
update agent_templates
set definition = (definition - 'llm' - 'execution' - 'system_prompt' - 'allowed_tools')
    || jsonb_build_object(
        'prompt_pack', jsonb_build_object('system_prompt', definition -> 'system_prompt'),
        'llm_config', coalesce(definition -> 'llm', '{}'::jsonb),
        'execution_policy', coalesce(definition -> 'execution', '{}'::jsonb),
        'tool_policy', jsonb_build_object(
            'mode', 'static', 'allowed', coalesce(definition -> 'allowed_tools', '[]'::jsonb)
        )
    )
where definition ? 'system_prompt';

alter table agent_templates
    add column description text
        generated always as (coalesce(definition ->> 'description', '')) stored,
    add column base_class text
        generated always as (coalesce(definition ->> 'base_class', 'ToolCallingAgent')) stored,
    add column llm_config jsonb
        generated always as (coalesce(definition -> 'llm_config', '{}'::jsonb)) stored,
    add column execution_policy jsonb
        generated always as (coalesce(definition -> 'execution_policy', '{}'::jsonb)) stored,
    add column tool_policy jsonb
        generated always as (coalesce(definition -> 'tool_policy', '{}'::jsonb)) stored,
    add column prompt_pack jsonb
        generated always as (coalesce(definition -> 'prompt_pack', '{}'::jsonb)) stored,
    add column multiagent_meta jsonb
        generated always as (coalesce(definition -> 'multiagent_meta', '{}'::jsonb)) stored,
    -- Reserved for dense agent search in toolsearch's embedding space; SearchAgents is
    -- lexical (BM25) today and leaves it null.
    add column embedding vector(384),
    -- builtin: installed from agent_templates.json at start; admin: written via AgentAdmin.
    -- Start never overwrites a template whose newest version came from an admin.
    add column source text not null default 'builtin' check (source in ('builtin', 'admin'));

-- Which tools a template version names (seed 003's M:N). '*' stands for "every active
-- catalog tool". No foreign key to the tools: the catalog belongs to toolsearch.
create table agent_template_tools (
    template_name text not null,
    template_version integer not null,
    tool_name text not null,
    role text not null check (role in ('required', 'optional')),
    primary key (template_name, template_version, tool_name),
    foreign key (template_name, template_version) references agent_templates (name, version)
);

create index agent_template_tools_tool on agent_template_tools (tool_name);

insert into agent_template_tools (template_name, template_version, tool_name, role)
select t.name, t.version, tool.name, 'optional'
from agent_templates t,
     jsonb_array_elements_text(t.definition -> 'tool_policy' -> 'allowed') as tool(name)
on conflict do nothing;

-- Long-lived workers built from one template version (instances.py). Rows are kept
-- after STOPPED so the history of failures stays readable.
create table agent_instances (
    instance_id text primary key,
    template_name text not null,
    template_version integer not null,
    state text not null default 'IDLE'
        check (state in ('IDLE', 'BUSY', 'RESETTING', 'ERROR', 'STOPPED')),
    session_id text,
    runtime_node text not null default '',
    failures integer not null default 0,
    last_used_at timestamptz,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    foreign key (template_name, template_version) references agent_templates (name, version)
);

create index agent_instances_template on agent_instances (template_name, state);

-- The session state machine (session_states.py holds the allowed transitions). No foreign
-- key to agent_instances: purging sessions and retiring instances stay independent.
alter table sessions
    add column state text not null default 'INITED'
        check (state in ('INITED', 'RESEARCHING', 'WAITING_FOR_CLARIFICATION', 'COMPLETED',
                         'FAILED', 'CANCELLED')),
    add column instance_id text,
    add column template_version integer,
    add column started_at timestamptz,
    add column finished_at timestamptz;
