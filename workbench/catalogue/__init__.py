"""The catalogue: every registered method and task described as data, kept on disk between
calls so that listing them, or checking which are current, never imports torch.

    detail   method_detail, task_detail: one method's or task's description (JSON-ready)
    cache    load(): the catalogue from ``$WORKBENCH_CACHE``; key(): the code stamp (size and
             time of every package and plugin file) that also keys the spec resolutions
             ``workbench.spec.resolved`` keeps
"""
