"""What each site of site-local data (``data.sites``) reports to the server: schema, band

statistics, held-out metrics.
"""
