"""The active context bundle (`memcli acb build`), one module per step.

- `request`: the request model (light: every command's start imports it);
- `build`: the section plan and `build_acb`, the entry point;
- `sections`: gathering each section's items through the bundle's `Filters`;
- `dedup`: collapsing (near-)duplicate evidence;
- `pack`: fitting items to the section caps and the token budget;
- `render`: the markdown (and JSON) an agent reads, and the exact lines that are counted;
- `stats`: request-metrics percentiles for `memcli stats` and `memcli doctor`.
"""
