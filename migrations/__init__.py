"""The Alembic environment of the platform's SQL schema.

``env.py`` runs the revisions of the platform (``versions/``, branch
``eventplatform``) and of every installed app (each app's own folder, one
branch per app, labelled with the app's name). Applications and the
``platform db`` commands reach it through
:mod:`eventplatform.projections.migrate`, which builds the Alembic
configuration; nothing here is imported directly.
"""
