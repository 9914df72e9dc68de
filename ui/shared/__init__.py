"""What every page uses: caches and the in-process memo, session state, the page context, keys, labels,
figure and table helpers, errors, background jobs and clicks, the frame, navigation and sidebar, the server
launcher, and the registry of models made in this session. Imports no feature room."""
