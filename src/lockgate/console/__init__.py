"""`lockgate console`: a web console over any Kafka-protocol cluster, through lockgate's own
admin and consumer clients (with the CLI's connection and security settings).

Layout: <area>.py gathers one page's data (pure async functions over the clients, returning
frozen dataclasses, no web imports); views_<area>.py holds the web handlers of that area
(each exposes ROUTES, which app.py concatenates); templates/<area>/ the pages, extending
templates/base.html. auth.py owns login, CSRF and the guard every mutating route goes through;
sampler.py and charts.py the live charts. The web stack (Starlette, Jinja2, uvicorn) is the
optional extra `console`: nothing outside this package imports it.
"""
