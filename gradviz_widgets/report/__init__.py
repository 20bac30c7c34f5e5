"""GradReport and what is said about it without torch: diagnosis sentences (`diagnose`), two
runs compared (`compare`), the CSV / JSON exports (`export`)."""
