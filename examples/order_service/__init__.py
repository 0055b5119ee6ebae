"""An order service writing orders to PostgreSQL and their events to lockgate atomically
(service.py), and a Spark job reading the events (events_report.py). See README.md."""
