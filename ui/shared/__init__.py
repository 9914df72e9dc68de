"""What every page uses: caches and the in-process memo, session state, the page context, keys, labels,
figure and table helpers, errors, background jobs (job_runner.py runs them without Streamlit, jobs.py binds them to
the pages), the frame, navigation and sidebar, the server launcher, and what this session made for other pages
(made.py). Imports no feature room."""
