"""Export and import of a workspace (docs/design.md, "Export and import"): a job item whose steps run on the table's
stream in the summarizer's function, each step bounded (one part written, or one range of an upload read) and moving
the job on conditionally, so an interrupted job resumes where it stopped and a step delivered twice writes nothing
twice. `lines` is the format, `export` and `importer` the steps, `jobs` starting them, running them and their status.
"""
