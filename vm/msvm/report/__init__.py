"""Static assets of the self-contained HTML profile report (CSS and JS, inlined by msvm.profile)."""
