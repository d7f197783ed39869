-- Search holds the catalog in memory (BM25 and an exact cosine over the embeddings), so
-- neither the full-text column nor the HNSW graph is read any more; both cost every insert.
drop index if exists tools_embedding;
drop index if exists tools_search;
alter table tools drop column if exists search;
drop function if exists tool_document(text, text, text[]);
